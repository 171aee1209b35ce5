"""A setting's value as a server's configuration file holds it: one value on
its own line, never a second line, an option or a comment of its own.

Every kind that writes `target.settings` into a file the server reads
(PostgreSQL's perflab.conf, MariaDB's option file, nginx.conf, and the
servers to come) checks its values in its settings model, so `perflab
check` refuses them with the key named (exit 2), and writes them with the
quoting of that file's own format:

- no value holds a line break or another control character (`one_line`,
  for any format: no file format here takes one inside a value, and a line
  break is how a value would add an option);
- PostgreSQL: a string in single quotes, a quote doubled and a backslash
  doubled (`postgres_quoted`), as its configuration lexer reads them;
- MariaDB option files: a value with a quote, `#`, a backslash or spaces at
  either end in double quotes, with `\\` and `\"` escaped
  (`option_file_value`), as mysys's option-file reader reads them; a line
  is at most `OPTION_LINE_BYTES` long, since the reader reads a longer one
  as two lines (the second an option of its own).
"""

from __future__ import annotations

import re

# C0 and C1 control characters (line feed, carriage return, tab, NUL, ...),
# DEL, and Unicode's own line and paragraph separators.
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
LINE_BREAKS = "\n\r\x0b\x0c\x85\u2028\u2029"

# mysys reads an option file with fgets into a 4096-byte buffer: a longer
# line is read as two, the rest of it an option line of its own. A margin
# below it for the name and the quoting.
OPTION_LINE_BYTES = 4000


def line_problem(value: object) -> str | None:
    """What keeps `value` from being one value on one line of a configuration
    file (a line break or another control character, and where), or None."""
    if not isinstance(value, str):
        return None
    found = CONTROL.search(value)
    if found is None:
        return None
    char = found.group()
    what = "a line break" if char in LINE_BREAKS else "a control character"
    return f"{what} ({char!r}) at character {found.start() + 1}"


def one_line(value: object, file: str) -> object:
    """`value` when it holds no line break or control character; else a
    ValueError saying why, for a settings model's validator (the key is the
    error's path). `file`: the file it is written into, for the message."""
    problem = line_problem(value)
    if problem is not None:
        shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "..."
        raise ValueError(f"got {shown}: {problem}, which would end the line in the server's {file} and start "
                         "another (an option of its own); allowed: one value on one line, without line breaks "
                         "or control characters (give each option its own key under target.settings)")
    return value


def postgres_quoted(text: str) -> str:
    """A string as postgresql.conf holds it: in single quotes, a quote
    written twice and a backslash twice (the configuration lexer reads
    backslash escapes inside quotes). `text` holds no line break
    (`one_line`): the lexer ends a quoted string there."""
    if line_problem(text) is not None:
        raise ValueError(f"{text!r} cannot be one value in postgresql.conf: {line_problem(text)}")
    return "'" + text.replace("\\", "\\\\").replace("'", "''") + "'"


# Characters after which mysys's option-file reader would not give the value
# back as written: quotes (stripped when at both ends; they hide a `#` from
# the comment rule), `#` (a comment outside quotes), a backslash (an escape).
_OPTION_SPECIAL = re.compile(r"[\"'#\\]")


def option_file_value(text: str) -> str:
    """A value as a MariaDB/MySQL option file holds it, read back exactly:
    as it is when nothing in it is special to the reader, else in double
    quotes with a backslash and a double quote escaped (inside quotes `#` is
    no comment, and the quotes are removed with the spaces around them)."""
    if line_problem(text) is not None:
        raise ValueError(f"{text!r} cannot be one value in an option file: {line_problem(text)}")
    if text and text == text.strip() and not _OPTION_SPECIAL.search(text):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def option_line_problem(line: str) -> str | None:
    """Why an option file cannot hold `line` as one line (too long for the
    reader), or None."""
    size = len(line.encode())
    if size > OPTION_LINE_BYTES:
        return (f"the option file's line would be {size} bytes; the server reads at most about "
                f"{OPTION_LINE_BYTES} as one line, and the rest as another option")
    return None
