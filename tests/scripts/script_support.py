"""Load a script as a module, so tests can call its main(argv)."""

from tally.local.cli import SCRIPTS, load_script

__all__ = ["SCRIPTS", "load_script"]
