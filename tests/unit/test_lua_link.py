"""What the loader sends of a script (redis/lua.py: includes spliced in, comment lines dropped),
and that what it sends compiles on a real Redis."""

from __future__ import annotations

from importlib import resources

import pytest

from celery_redqueue.redis.lua import _sent, code_of, script

SCRIPTS = sorted(
    p.name[:-4]
    for p in resources.files("celery_redqueue").joinpath("lua").iterdir()
    if p.name.endswith(".lua") and "-- Lost reply:" in p.read_text(encoding="utf-8")
)


def test_comment_and_blank_lines_are_not_sent():
    sent = _sent(["-- a comment", "local s = 'a -- b'  -- c", "", "  -- indented", "return s"])
    assert sent == ["local s = 'a -- b'  -- c", "return s"]


def test_a_comment_inside_a_string_is_code():
    assert code_of("x = 'a--b' -- c") == "x = 'a--b' "
    assert code_of('x = "a\\"--" -- c') == 'x = "a\\"--" '


@pytest.mark.parametrize("line", ["--[[ a block", "local s = [[text", "local s = [==[x"])
def test_long_brackets_are_refused(line):
    with pytest.raises(ValueError, match="long brackets"):
        _sent(["local x = 1", line, "]]"])


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_shipped_script_compiles_on_redis(redqueue_redis, name):
    shipped = script(name)
    assert redqueue_redis.script_load(shipped.source) == shipped.sha
    # the header lines are read from the file, not from what is shipped
    assert shipped.resend in (True, False)
    assert "-- Lost reply:" not in shipped.source


def test_the_status_names_of_lua_and_python_agree():
    from celery_redqueue.redis import lua

    text = resources.files("celery_redqueue").joinpath("lua", "take_status.lua").read_text()
    names, values = next(
        line[len("local ") :].split(" = ")
        for line in text.splitlines()
        if line.startswith("local EMPTY, ")
    )
    named = dict(zip(names.split(", "), map(int, values.split(", ")), strict=True))
    assert named == {name: getattr(lua, name) for name in named}
    assert set(named) >= {"EMPTY", "TAKEN", "LINGER", "AGAIN", "LATER", "UPKEEP", "MIXED"}


def test_an_include_inside_a_block_is_refused(monkeypatch):
    from celery_redqueue.redis import lua

    files = {"s": "if x then\n  --#include clock\nend", "t": "--#include clock\nreturn now_ms()"}
    real = lua._read
    monkeypatch.setattr(lua, "_read", lambda name: files.get(name) or real(name))
    with pytest.raises(ValueError, match="an include inside a block"):
        lua._expand("s", {"s"})
    assert "local function now_ms()" in lua._expand("t", {"t"})
