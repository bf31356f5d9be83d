"""User errors of the `metrics-sched` command: one line on stderr and exit 2, never a traceback.

A command, or the wiring it calls, raises UserError for anything the user can fix (a missing or invalid
kubeconfig, an API server that cannot be reached or refuses the credentials, a port taken, a bad flag value);
the CLI's main() prints it and exits EXIT_USER_ERROR. It lives in the app because the wiring raises it.
"""

from __future__ import annotations

EXIT_USER_ERROR = 2  # argparse's exit status for a bad flag, and check-config's for an invalid config


class UserError(Exception):
    """Something the user can fix; the message is the whole story, on one line."""

    def one_line(self) -> str:
        # Messages may quote multi-line text (e.g. an API server's answer): fold it, the line is the contract.
        return " ".join(str(self).split())


__all__ = ["EXIT_USER_ERROR", "UserError"]
