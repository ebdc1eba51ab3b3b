"""The embedded server's exit codes, shared by the child and its owner.

Apart from ``server`` so that the agent process, which only reads the codes, does not
import the child's entry point (and ctypes with it).
"""

BUSY_EXIT = 75  # EX_TEMPFAIL
"""Another process still holds the store: the owner waits and tries again."""
