"""configure_logging: one JSON object per line, to the component's file and to stderr."""
from __future__ import annotations

import json
import logging

import pytest
import structlog

from broker.logs import configure_logging


@pytest.fixture
def restore_logging():
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
            handler.close()
    root.setLevel(level)
    structlog.reset_defaults()


def read(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_json_lines_to_file_and_stderr(tmp_path, capsys, restore_logging):
    log = configure_logging("scheduler", tmp_path / "run", level="info")
    log.info("round.done", groups=3)
    structlog.get_logger("elsewhere").warning("agent.lost", node="n1")
    structlog.get_logger().debug("too.chatty")  # below the level
    logging.getLogger("somelib").warning("plain %s", "stdlib")
    try:
        raise ValueError("bad")
    except ValueError:
        structlog.get_logger().exception("handler.failed")
    lines = read(tmp_path / "run" / "scheduler.log")
    assert [l["event"] for l in lines] == ["round.done", "agent.lost", "plain stdlib",
                                           "handler.failed"]
    assert all(l["component"] == "scheduler" and l["ts"].endswith("Z") for l in lines)
    assert lines[0]["groups"] == 3 and lines[0]["level"] == "info"
    assert lines[1]["node"] == "n1" and lines[1]["level"] == "warning"
    assert "ValueError: bad" in lines[3]["exception"]
    err = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert [l["event"] for l in err] == [l["event"] for l in lines]


def test_reconfigure_replaces_handlers_and_no_file_without_run_dir(tmp_path, capsys,
                                                                   restore_logging):
    configure_logging("a", tmp_path)
    configure_logging("b", None, level="debug")
    structlog.get_logger().debug("once")
    assert not (tmp_path / "b.log").exists()
    err = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert [(l["event"], l["component"]) for l in err] == [("once", "b")]
    assert read(tmp_path / "a.log") == []
    with pytest.raises(ValueError):
        configure_logging("c", None, level="loud")
