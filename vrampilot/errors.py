"""Errors a user can cause. The CLI prints their message and exits non-zero; the GUI shows it."""


class UserError(Exception):
    """Base for errors whose message is written for the person using the app."""
