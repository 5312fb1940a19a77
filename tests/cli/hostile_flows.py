"""Workflows whose recorded text is hostile to a terminal (``tests.cli.hostile_flows``):
Rich markup that closes a tag nobody opened or names an action, escape sequences that set the
window title or clear the screen, a carriage return that overwrites, a bidi override. Names
refuse control characters (``wf.store._limits.check_name``), so they carry markup and bidi
only; errors and values carry everything."""

from __future__ import annotations

import wf

MARKUP = "[/] [@click=app.quit]x[/]"
CONTROLS = "\x1b]0;pwned\x07 \x1b[2J safe\rEVIL back\x08"
BIDI = "\u202egnp"
HOSTILE = f"{MARKUP} {CONTROLS} {BIDI}"
NAME = "step[/]name\u202e"
TOKEN = "tok[/]en [@click=app.quit]x[/]\u202e"
FORGED = "oops\n13:44:38 wrun_01FAKEFAKEFAKEFAKEFAKEFAKE payroll completed in 0.10s"


@wf.step(name=NAME, max_retries=0)
def explode(message: str) -> None:
    raise ValueError(message)


@wf.workflow(name="wf[/]name\u202e")
async def failing(message: str = HOSTILE) -> None:
    await explode(message)


@wf.workflow(name="hook[/]flow")
async def waiting() -> str:
    hook: wf.Hook[str] = wf.create_hook(str, token=TOKEN)
    return await hook.next()


@wf.workflow(name="forger")
async def forger() -> None:
    await explode(FORGED)


@wf.step
def chatter() -> None:
    print(f"out {CONTROLS}")


@wf.workflow(name="chatty")
async def chatty() -> None:
    await chatter()
