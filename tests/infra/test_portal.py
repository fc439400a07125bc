"""The web portal in a real browser (Debian's headless Chromium through Selenium and Debian's
chromedriver): a directory user logs in with their password, chooses JupyterLab on the smallest
GPU virtual partition, the session starts as a Slurm job on a compute node, a notebook cell
prints the node and CUDA_VISIBLE_DEVICES (one GPU), TensorBoard opens through the session,
another user cannot open that session, stopping it ends the job and sacct shows it under the
user's account; a wrong password and a user the directory does not know are refused. A
screenshot of each step goes to the sandbox directory (hal_sandbox_workdir/screenshots).

Passwords: the model holds none (users set their own); the test sets a random one on the
directory host for the users it logs in as, and removes it afterwards.
"""

from __future__ import annotations

import json
import secrets
import shlex
import socket
import ssl
import tempfile
import time
from pathlib import Path

import pytest

from deployed import deployed, retry

D = deployed()
CATALOGUE = json.loads(D.rendered("etc/hal-provision/portal.json") or "null")
DIRECTORY = json.loads(D.rendered("etc/hal-provision/ldap-directory.json") or "null")
PLAN = json.loads(D.rendered("etc/hal-provision/slurm-accounting.json") or "{}")
PORTAL = D.hosts_in("service_portal")
LDAP = D.hosts_in("service_ldap")
CA = "/etc/ssl/hal-provision/cluster-ca.crt"
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"

pytestmark = pytest.mark.skipif(
    CATALOGUE is None or not PORTAL or DIRECTORY is None, reason="the model has no portal (or no directory)"
)

# Two active users with a Slurm account: one starts a session, the other tries to open it.
_active = [u["name"] for u in PLAN.get("users", [])]
USER, OTHER = (_active + [None, None])[:2]
APP = next((a for a in (CATALOGUE or {}).get("apps", []) if a["kind"] == "jupyterlab" and not a["container"]), None)
GPU_VP = next((vp for vp, s in (APP or {}).get("virtual_partitions", {}).items() if s["gpus"] == 1), None)


def _url(path: str = "") -> str:
    return f"https://{D.hostvars[PORTAL[0]]['ansible_host']}:{CATALOGUE['port']}{path}"


def _root(host: str, command: str, timeout: int = 60):
    return D.host(host).run("timeout %s bash -c %s", str(timeout), command)


def _shots() -> Path:
    workdir = D.hostvars[D.login].get("hal_sandbox_workdir")
    out = Path(workdir) / "screenshots" if workdir else Path(tempfile.mkdtemp(prefix="hal-portal-shots-"))
    out.mkdir(parents=True, exist_ok=True)
    return out


SHOTS = _shots() if CATALOGUE else None


def _set_password(name: str, password: str | None) -> None:
    """Give a directory user a password (None: remove it), as root over ldapi on the directory host."""
    dn = f"uid={name},{DIRECTORY['people_dn']}"
    if password is None:
        ldif = f"dn: {dn}\nchangetype: modify\ndelete: userPassword\n"
    else:
        hashed = _root(LDAP[0], f"slappasswd -s {shlex.quote(password)}").stdout.strip()
        assert hashed.startswith("{SSHA}"), hashed
        ldif = f"dn: {dn}\nchangetype: modify\nreplace: userPassword\nuserPassword: {hashed}\n"
    out = _root(LDAP[0], f"printf %s {shlex.quote(ldif)} | ldapmodify -Q -Y EXTERNAL -H ldapi:///")
    assert out.rc == 0 or (password is None and "No such attribute" in out.stderr), out.stderr


@pytest.fixture(scope="module")
def passwords():
    made = {name: secrets.token_urlsafe(18) for name in (USER, OTHER) if name}
    for name, password in made.items():
        _set_password(name, password)
    yield made
    for name in made:
        _set_password(name, None)


@pytest.fixture(scope="module")
def ca_file():
    text = _root(PORTAL[0], f"cat {CA}").stdout
    assert "BEGIN CERTIFICATE" in text
    with tempfile.NamedTemporaryFile("w", suffix=".crt", delete=False) as f:
        f.write(text)
    return f.name


def _browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--window-size=1280,900",
        "--ignore-certificate-errors",
    ):  # the chain is checked against the cluster CA below
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    driver.set_page_load_timeout(120)
    return driver


@pytest.fixture()
def browser():
    driver = _browser()
    yield driver
    driver.quit()


def _shot(driver, name: str) -> None:
    driver.save_screenshot(str(SHOTS / f"{name}.png"))


def _login(driver, name: str, password: str) -> None:
    from selenium.webdriver.common.by import By

    driver.get(_url("/hub/login"))
    driver.find_element(By.ID, "username_input").send_keys(name)
    driver.find_element(By.ID, "password_input").send_keys(password)
    driver.find_element(By.ID, "login_submit").click()


def _wait(driver, condition, timeout: float, what: str):
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        return WebDriverWait(driver, timeout, poll_frequency=1).until(condition)
    except TimeoutException:
        _shot(driver, f"timeout-{what}")
        raise AssertionError(
            f"{what}: not within {timeout}s; at {driver.current_url}\n{D.journal(PORTAL[0], 'jupyterhub', 40)}"
        ) from None


def _stop_session(driver) -> None:
    """Stop USER's session from the hub's home page (after a failure: and cancel its job), so
    that the next test starts from a stopped server."""
    from selenium.webdriver.common.by import By

    try:
        driver.get(_url("/hub/home"))
        buttons = driver.find_elements(By.ID, "stop")
        if buttons:
            buttons[0].click()
        retry(lambda: not _jobs(USER), 60, 2)
    finally:
        for line in _jobs(USER):
            _root(D.controller, f"scancel {line.split()[0]}")


def _stop_from_home(driver, timeout: float = 120) -> bool:
    """Click the home page's stop button as a user does, and wait for the session's job to end.
    The button works through the page's script, which binds it once the page has loaded: click
    only then, and again after a reload if the first click went unheard (JupyterHub logged no
    stop request). True when USER has no job left."""
    from selenium.webdriver.common.by import By

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        driver.get(_url("/hub/home"))
        _wait(
            driver,
            lambda d: (
                d.execute_script("return document.readyState") == "complete"
                and [b for b in d.find_elements(By.ID, "stop") if b.is_displayed() and b.is_enabled()]
            ),
            60,
            "the stop button",
        )
        driver.find_element(By.ID, "stop").click()
        if retry(lambda: not _jobs(USER), min(40, max(deadline - time.monotonic(), 1)), 2):
            return True
    return not _jobs(USER)


def _jobs(user: str) -> list[str]:
    out = _root(D.controller, f"squeue -h -u {user} -o '%i %j %T %N'")
    return [line for line in out.stdout.splitlines() if line.strip()]


# ---- TLS and refusals ----------------------------------------------------------------------------


def test_portal_speaks_tls_with_a_certificate_from_the_cluster_ca(ca_file):
    host = D.hostvars[PORTAL[0]]["ansible_host"]
    ctx = ssl.create_default_context(cafile=ca_file)
    with socket.create_connection((host, CATALOGUE["port"]), timeout=15) as sock:
        with ctx.wrap_socket(sock, server_hostname=host) as tls:  # the IP is in the certificate
            assert tls.version() in ("TLSv1.2", "TLSv1.3")
            subject = dict(x[0] for x in tls.getpeercert()["subject"])
    assert subject["commonName"] == CATALOGUE["server_name"]


@pytest.mark.skipif(CATALOGUE is None or CATALOGUE.get("front_end") != "jupyterhub", reason="no JupyterHub")
def test_the_hub_runs_slurm_commands_only_as_directory_users_and_keeps_no_other_environment():
    """The hub's sudo rule: squeue as a directory user works; as slurm (a system account) or
    root it is refused, and so is keeping the caller's environment (-E: no SETENV)."""
    host = PORTAL[0]
    hub = D.hostvars[host].get("portal_hub_user", "jupyterhub")
    as_hub = f"runuser -u {hub} -- sudo -n"
    allowed = _root(host, f"{as_hub} -u {USER} /usr/bin/squeue -h -u {USER}")
    assert allowed.rc == 0, f"sudo -u {USER} squeue as {hub}: {allowed.stderr}"
    for target in ("slurm", "root"):
        refused = _root(host, f"{as_hub} -u {target} /usr/bin/squeue -h")
        # sudo says "not allowed", or with -n asks for the password no rule spares it
        assert refused.rc != 0 and ("not allowed" in refused.stderr or "password is required" in refused.stderr), (
            target,
            refused.stdout,
            refused.stderr,
        )
    kept = _root(host, f"{as_hub} -E -u {USER} /usr/bin/squeue -h -u {USER}")
    assert kept.rc != 0 and "preserve the environment" in kept.stderr, (kept.stdout, kept.stderr)
    other = _root(host, f"{as_hub} -u {USER} /usr/bin/id")
    assert other.rc != 0, "the hub may run a command other than sbatch, squeue and scancel"


def test_wrong_password_is_refused(browser, passwords):
    from selenium.webdriver.common.by import By

    _login(browser, USER, passwords[USER] + "x")
    _wait(browser, lambda d: "Invalid username or password" in d.page_source, 30, "refusal of a wrong password")
    _shot(browser, "01-wrong-password")
    assert "/hub/login" in browser.current_url
    assert browser.find_elements(By.ID, "login_submit")


def test_user_not_in_the_directory_is_refused(browser, passwords):
    _login(browser, "nosuchuser", secrets.token_urlsafe(12))
    _wait(browser, lambda d: "Invalid username or password" in d.page_source, 30, "refusal of an unknown user")
    assert "/hub/login" in browser.current_url


# ---- a session ---------------------------------------------------------------------------------------


@pytest.mark.skipif(APP is None or GPU_VP is None or OTHER is None, reason="no JupyterLab app on a one-GPU partition")
def test_jupyterlab_session_on_a_gpu_node_end_to_end(browser, passwords):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select

    assert not _jobs(USER), f"{USER} already has jobs: {_jobs(USER)}"
    try:
        _login(browser, USER, passwords[USER])
        _wait(browser, lambda d: d.find_elements(By.ID, "hal-session"), 60, "the spawn form")
        _shot(browser, "02-spawn-form")
        Select(browser.find_element(By.ID, "hal-session")).select_by_value(f"{APP['name']}:{GPU_VP}")
        hours = browser.find_element(By.ID, "hal-hours")
        hours.clear()
        hours.send_keys("1")
        browser.find_element(By.CSS_SELECTOR, "form input[type=submit], form button[type=submit]").click()
        _shot(browser, "03-pending")
        timeout = CATALOGUE["start_timeout_seconds"] + 60
        _wait(browser, lambda d: f"/user/{USER}/lab" in d.current_url, timeout, "the JupyterLab session")
        browser.get(_url(f"/user/{USER}/lab?reset"))  # a fresh workspace: the launcher, not last run's tabs
        _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, ".jp-LauncherCard"), 120, "JupyterLab's launcher")
        _shot(browser, "04-jupyterlab")
        jobs = _jobs(USER)
        assert len(jobs) == 1, jobs
        job_id, job_name, state, node = jobs[0].split()
        assert (job_name, state) == (f"portal-{APP['name']}", "RUNNING") and node in D.hosts_in("slurm_nodes")

        # A notebook cell on the session's node.
        browser.find_element(By.CSS_SELECTOR, '.jp-LauncherCard[data-category="Notebook"]').click()
        cell = _wait(
            browser, lambda d: d.find_elements(By.CSS_SELECTOR, ".jp-Notebook .jp-Cell .cm-content"), 120, "a notebook"
        )[0]
        _wait(
            browser,
            lambda d: (
                "Idle" in d.find_element(By.CSS_SELECTOR, ".jp-Notebook").get_attribute("class")
                or d.find_elements(By.CSS_SELECTOR, '[data-status="idle"]')
            ),
            120,
            "the kernel",
        )
        cell.click()
        cell.send_keys(
            "import os, socket; print('HOST', socket.gethostname(), 'GPUS', os.environ.get('CUDA_VISIBLE_DEVICES'))"
        )
        cell.send_keys(Keys.SHIFT, Keys.ENTER)
        output = _wait(
            browser,
            lambda d: [e.text for e in d.find_elements(By.CSS_SELECTOR, ".jp-OutputArea-output") if "HOST" in e.text],
            120,
            "the cell's output",
        )[0]
        _shot(browser, "05-notebook-cell")
        words = output.split()
        assert words[0] == "HOST" and words[1] == node, output
        assert words[2] == "GPUS" and len(words[3].split(",")) == 1 and words[3] != "None", output

        # TensorBoard through the session (jupyter-server-proxy).
        browser.get(_url(f"/user/{USER}/tensorboard/"))
        _wait(browser, lambda d: "TensorBoard" in d.title, 180, "TensorBoard")
        _shot(browser, "06-tensorboard")

        # Another user cannot open this session.
        other = _browser()
        try:
            _login(other, OTHER, passwords[OTHER])
            _wait(other, lambda d: "/hub/login" not in d.current_url, 60, f"{OTHER}'s login")
            other.get(_url(f"/user/{USER}/lab"))
            _wait(
                other,
                lambda d: f"/user/{USER}/lab" not in d.current_url or "403" in d.page_source,
                60,
                f"{OTHER} kept out of {USER}'s session",
            )
            _shot(other, "07-other-user-refused")
            assert not other.find_elements(By.CSS_SELECTOR, ".jp-LauncherCard")
        finally:
            other.quit()
    except BaseException:
        _stop_session(browser)
        raise

    # Stopping the session ends the job; sacct has it under the user's account.
    try:
        assert _stop_from_home(browser), f"{USER}'s session job is still there: {_jobs(USER)}"
    except BaseException:
        _stop_session(browser)  # leave no session holding a GPU for the tests after this one
        raise
    _shot(browser, "08-stopped")
    account = next(u for u in PLAN["users"] if u["name"] == USER)["associations"][0].split("|")[0]

    def accounted():
        out = _root(D.controller, f"sacct -n -X -P -j {job_id} -o JobName,User,Account,State").stdout.strip()
        return out if out and "RUNNING" not in out else ""

    row = retry(accounted, 60, 2).split("|")
    assert row[:3] == [f"portal-{APP['name']}", USER, account], row


H2O = next((a for a in (CATALOGUE or {}).get("apps", []) if a["kind"] == "h2o"), None)
H2O_VP = next((vp for vp, s in (H2O or {}).get("virtual_partitions", {}).items() if s["gpus"] == 1), None)


@pytest.mark.skipif(H2O is None or H2O_VP is None, reason="no H2O app on a one-GPU partition")
def test_h2o_flow_opens_in_its_session(browser, passwords):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    assert retry(lambda: not _jobs(USER), 120, 2), f"{USER} still has jobs: {_jobs(USER)}"
    _login(browser, USER, passwords[USER])
    _wait(browser, lambda d: d.find_elements(By.ID, "hal-session"), 60, "the spawn form")
    Select(browser.find_element(By.ID, "hal-session")).select_by_value(f"{H2O['name']}:{H2O_VP}")
    browser.find_element(By.CSS_SELECTOR, "form input[type=submit], form button[type=submit]").click()
    try:
        _wait(
            browser,
            lambda d: f"/user/{USER}/h2o/" in d.current_url,
            CATALOGUE["start_timeout_seconds"] + 60,
            "the H2O session",
        )
        _wait(browser, lambda d: "H2O Flow" in d.title, 240, "H2O Flow")
        _shot(browser, "09-h2o-flow")
        assert [line.split()[1] for line in _jobs(USER)] == [f"portal-{H2O['name']}"]
    finally:
        try:
            assert _stop_from_home(browser), f"{USER}'s H2O job is still there: {_jobs(USER)}"
        except BaseException:
            _stop_session(browser)
            raise
