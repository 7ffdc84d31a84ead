"""The parts of a code block that syntax highlighting colours: keywords, strings, comments, numbers.

A small scanner rather than a highlighting package: the chat shows short snippets in a handful of
languages, and a wrong colour costs little where a wrong escape would cost much (the block is
never HTML: the chat colours ranges of the text Qt's Markdown reader already placed, see
markdown_view.py). The fence's info string names the language (```python); a block without one
gets strings, numbers and line comments only. Qt-free, so it is tested on its own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

Kind = Literal["keyword", "constant", "string", "comment", "number"]


@dataclass(frozen=True)
class Token:
    start: int  # offset in the block's text
    end: int
    kind: Kind


@dataclass(frozen=True)
class Language:
    keywords: frozenset[str]
    constants: frozenset[str] = frozenset()
    line_comment: tuple[str, ...] = ()
    block_comment: tuple[str, str] | None = None
    strings: tuple[str, ...] = ('"', "'")  # quote marks; a triple quote is listed as such
    case_insensitive: bool = False  # SQL


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


_C_FAMILY = _words(
    "if else for while do switch case default break continue return goto struct union enum typedef "
    "static const extern inline volatile sizeof void char short int long float double signed unsigned "
    "bool auto register restrict"
)
_CPP = _C_FAMILY | _words(
    "class public private protected virtual override final template typename namespace using new delete "
    "this throw try catch operator friend explicit constexpr noexcept nullptr_t decltype mutable static_cast "
    "dynamic_cast reinterpret_cast const_cast co_await co_return co_yield concept requires"
)
_JS = _words(
    "var let const function return if else for while do switch case default break continue new delete "
    "typeof instanceof in of class extends super this import export from as async await yield try catch "
    "finally throw void with static get set interface type enum implements private public protected "
    "readonly declare namespace keyof"
)

_PYTHON = Language(
    _words(
        "and as assert async await break class continue def del elif else except finally for from global "
        "if import in is lambda nonlocal not or pass raise return try while with yield match case"
    ),
    _words("True False None self cls"),
    line_comment=("#",),
    strings=('"""', "'''", '"', "'"),
)
_SHELL = Language(
    _words(
        "if then else elif fi for in do done while until case esac function return local export set unset "
        "echo cd exit source alias readonly shift break continue"
    ),
    _words("true false"),
    line_comment=("#",),
)
_C = Language(_C_FAMILY, _words("NULL true false"), ("//",), ("/*", "*/"))
_CPP_LANG = Language(_CPP, _words("nullptr true false NULL"), ("//",), ("/*", "*/"))
_JS_LANG = Language(_JS, _words("true false null undefined NaN Infinity"), ("//",), ("/*", "*/"), ('"', "'", "`"))
_JAVA = Language(
    _C_FAMILY
    | _words(
        "class interface extends implements public private protected abstract final new this super throw "
        "throws try catch finally import package instanceof synchronized var record byte boolean"
    ),
    _words("true false null"),
    ("//",),
    ("/*", "*/"),
)
_RUST = Language(
    _words(
        "as async await break const continue crate dyn else enum extern fn for if impl in let loop match mod "
        "move mut pub ref return self Self static struct super trait type unsafe use where while"
    ),
    _words("true false None Some Ok Err"),
    ("//",),
    ("/*", "*/"),
    ('"',),
)
_GO = Language(
    _words(
        "break case chan const continue default defer else fallthrough for func go goto if import interface "
        "map package range return select struct switch type var"
    ),
    _words("true false nil iota"),
    ("//",),
    ("/*", "*/"),
    ('"', "'", "`"),
)
_SQL = Language(
    _words(
        "select from where and or not insert into values update set delete create table drop alter index "
        "join left right inner outer on group by order having limit offset as distinct union all primary key "
        "foreign references null is in like between case when then else end"
    ),
    _words("true false"),
    ("--",),
    ("/*", "*/"),
    ("'", '"'),
    case_insensitive=True,
)
_JSON = Language(frozenset(), _words("true false null"), strings=('"',))
_YAML = Language(frozenset(), _words("true false null yes no on off"), ("#",))
_PLAIN = Language(frozenset(), line_comment=("#", "//"))

LANGUAGES: dict[str, Language] = {
    **dict.fromkeys(("python", "py", "python3", "py3"), _PYTHON),
    **dict.fromkeys(("bash", "sh", "shell", "zsh", "console", "shell-session"), _SHELL),
    **dict.fromkeys(("c", "h"), _C),
    **dict.fromkeys(("cpp", "c++", "cc", "cxx", "hpp", "cuda", "cu"), _CPP_LANG),
    **dict.fromkeys(("javascript", "js", "jsx", "typescript", "ts", "tsx", "mjs"), _JS_LANG),
    **dict.fromkeys(("java", "kotlin", "kt", "csharp", "cs", "c#"), _JAVA),
    **dict.fromkeys(("rust", "rs"), _RUST),
    **dict.fromkeys(("go", "golang"), _GO),
    "sql": _SQL,
    **dict.fromkeys(("json", "jsonc"), _JSON),
    **dict.fromkeys(("yaml", "yml", "toml", "ini"), _YAML),
}

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NUMBER = re.compile(r"0[xX][0-9a-fA-F_]+|(?:\d[\d_]*\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


def language(info: str) -> Language:
    """The language a fence's info string names (its first word, "```python title=x"); none known:
    strings, numbers and line comments only."""
    name = info.strip().split(maxsplit=1)[0].lower() if info.strip() else ""
    return LANGUAGES.get(name, _PLAIN)


def tokens(code: str, info: str = "") -> list[Token]:
    """The coloured parts of `code`, in order, without overlaps."""
    lang = language(info)
    out: list[Token] = []
    i, n = 0, len(code)
    while i < n:
        c = code[i]
        if lang.block_comment and code.startswith(lang.block_comment[0], i):
            end = code.find(lang.block_comment[1], i + len(lang.block_comment[0]))
            end = n if end < 0 else end + len(lang.block_comment[1])
            out.append(Token(i, end, "comment"))
            i = end
            continue
        marker = next((m for m in lang.line_comment if code.startswith(m, i)), None)
        if marker is not None and (lang is not _PLAIN or not code[code.rfind("\n", 0, i) + 1 : i].strip()):
            # An unnamed block's "#" or "//" is a comment only at the start of a line (a shell prompt,
            # a URL or a hashtag elsewhere is not).
            end = code.find("\n", i)
            end = n if end < 0 else end
            out.append(Token(i, end, "comment"))
            i = end
            continue
        quote = next((q for q in lang.strings if code.startswith(q, i)), None)
        if quote is not None:
            out.append(Token(i, (end := _string_end(code, i, quote)), "string"))
            i = end
            continue
        starts_number = c.isdigit() or (c == "." and i + 1 < n and code[i + 1].isdigit())
        if starts_number and (i == 0 or not (code[i - 1].isalnum() or code[i - 1] == "_")):
            m = _NUMBER.match(code, i)
            if m and m.end() > i:
                out.append(Token(i, m.end(), "number"))
                i = m.end()
                continue
        if c.isalpha() or c == "_":
            m = _WORD.match(code, i)
            assert m is not None  # c starts a word
            word = m.group(0).lower() if lang.case_insensitive else m.group(0)
            if word in lang.keywords:
                out.append(Token(i, m.end(), "keyword"))
            elif word in lang.constants:
                out.append(Token(i, m.end(), "constant"))
            i = m.end()
            continue
        i += 1
    return out


def _string_end(code: str, start: int, quote: str) -> int:
    """Where the string opened at `start` ends: its closing quote (a backslash escapes the next
    character), the end of the line for an unclosed one-line string, or the end of the block."""
    i = start + len(quote)
    multi = len(quote) == 3 or quote == "`"
    while i < len(code):
        if code[i] == "\\":
            i += 2
            continue
        if code.startswith(quote, i):
            return i + len(quote)
        if code[i] == "\n" and not multi:
            return i
        i += 1
    return len(code)
