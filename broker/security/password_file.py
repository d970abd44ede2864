"""Reading a password from a file: its first line, without the line's end.

Settings name a file rather than hold a password (``sasl_password_file``),
so that the password is neither in a settings file checked in somewhere nor
in a process's arguments (``ps`` shows those)."""
from __future__ import annotations


def read_password_file(path: str, setting: str = "password file") -> str:
    """The password in ``path``; ValueError (naming ``setting``) when the
    file cannot be read or its first line is empty."""
    try:
        with open(path, encoding="utf-8") as f:
            password = f.readline().rstrip("\r\n")
    except OSError as exc:
        raise ValueError(f"{setting} {path}: {exc.strerror or exc}") from None
    if not password:
        raise ValueError(f"{setting} {path}: its first line is empty")
    return password
