"""Node images for network boot: what goes into one (recipe.py, pure but for reading the roles'
package lists) and how it is built, listed and pruned on the management node (store.py, build.py)."""
