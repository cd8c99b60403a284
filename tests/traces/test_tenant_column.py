"""The tenant a job runs for (`tenant`): an optional column that reads back as written; a
bad cell is one line naming file, line and field; a record on the wire keeps it."""
from __future__ import annotations

import dataclasses

import pytest

from traces import read_trace, write_trace
from traces.errors import TraceError
from traces.record import record_from_map, record_to_map
from traces.validate import validate
from tests.helpers import job


def owned(job_id: int, tenant: str):
    return dataclasses.replace(job(job_id), tenant=tenant)


def test_tenants_read_back_and_a_trace_without_them_has_no_column(tmp_path):
    write_trace(tmp_path / "plain.csv", [job(0)])
    assert "tenant" not in (tmp_path / "plain.csv").read_text().splitlines()[0]
    stated = [owned(0, "vision"), owned(1, ""), owned(2, "nlp.team-2")]
    write_trace(tmp_path / "t.csv", stated)
    lines = (tmp_path / "t.csv").read_text().splitlines()
    assert lines[0].endswith(",priority,tenant") and lines[2].endswith(",")
    assert read_trace(tmp_path / "t.csv") == stated


@pytest.mark.parametrize("cell", ["a b", "-x", "x" * 65, "é"])
def test_a_bad_tenant_cell_is_one_line_naming_the_line_and_field(tmp_path, cell):
    write_trace(tmp_path / "t.csv", [owned(0, "ok")])
    lines = (tmp_path / "t.csv").read_text().splitlines()
    lines[1] = lines[1].rsplit(",", 1)[0] + "," + cell
    (tmp_path / "t.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(TraceError) as err:
        read_trace(tmp_path / "t.csv")
    assert len(str(err.value).splitlines()) == 1
    assert str(err.value).startswith(f"{tmp_path / 't.csv'}:2: tenant: must be empty or a name")


def test_the_wire_form_keeps_a_tenant_and_leaves_out_none():
    assert "tenant" not in record_to_map(job(0))
    assert record_from_map(record_to_map(owned(0, "nlp"))) == owned(0, "nlp")
    problems = validate([dataclasses.replace(job(0), tenant=7)])
    assert [(p.field, p.message.split(",")[0]) for p in problems] == [
        ("tenant", "must be empty or a name of 1-64 letters")]
