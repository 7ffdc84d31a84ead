"""The scanner behind code blocks' syntax colours (vrampilot/ui/chat/code_tokens.py), on its own."""

from __future__ import annotations

from vrampilot.ui.chat.code_tokens import tokens


def parts(code: str, info: str = "") -> list[tuple[str, str]]:
    return [(code[t.start : t.end], t.kind) for t in tokens(code, info)]


def test_each_language_s_keywords_strings_comments_and_numbers() -> None:
    assert parts('def f(x=1.5e3):\n    """doc\n    more"""  # c\n    return None', "python") == [
        ("def", "keyword"),
        ("1.5e3", "number"),
        ('"""doc\n    more"""', "string"),
        ("# c", "comment"),
        ("return", "keyword"),
        ("None", "constant"),
    ]
    assert parts('int x = 0x1F; /* a\nb */ char *s = "a\\"b";', "c") == [
        ("int", "keyword"),
        ("0x1F", "number"),
        ("/* a\nb */", "comment"),
        ("char", "keyword"),
        ('"a\\"b"', "string"),
    ]
    # SQL's keywords in any case; Rust's lifetimes are not strings; a name with digits is a name.
    assert parts("Select v2 FROM t -- all", "SQL") == [
        ("Select", "keyword"),
        ("FROM", "keyword"),
        ("-- all", "comment"),
    ]
    assert parts("fn f<'a>(s: &'a str) {}", "rust") == [("fn", "keyword")]
    # The info string's first word names the language; an unknown one is a block without one.
    assert parts("let x = `t`", "ts title=a.ts") == [("let", "keyword"), ("`t`", "string")]


def test_a_block_without_a_language_colours_little() -> None:
    # "#" and "//" are comments only at a line's start (a prompt, a URL or a hashtag elsewhere is not).
    assert parts("# install\npip install x  # not a comment\nsee https://example.org/#a 'q' 42") == [
        ("# install", "comment"),
        ("'q'", "string"),
        ("42", "number"),
    ]
    assert parts('"unclosed\nnext') == [('"unclosed', "string")]  # a one-line string ends with its line
