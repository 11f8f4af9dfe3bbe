"""The conformance summary table: one row per backend and op (per option with ``detail``); columns line up whatever
the backend and op names."""

from conformance.report import Stats, merge_reports


def test_summary_columns_line_up_with_long_names():
    st = Stats()
    for backend, op, status in [("device:cuda:0", "grouped_gemm_exact", "pass"), ("oracle", "quantize", "mismatch")]:
        st.add(dict(backend=backend, op=op, index=0, status=status, seconds=0.5,
                    tags={"algorithm": "fused_pair_256x256", "values": "normal"}))
    st.skipped.append(dict(backend="(none)", op="layout", reason="no backend"))
    lines = st.table(detail=True).splitlines()
    header = lines[0]
    col = header.index("option")
    rows = [ln for ln in lines[2:] if not ln.startswith("-") and not ln.startswith("total")]
    assert len(rows) == 2 * 3 + 1  # (all) + two option rows per task, one skipped op
    for ln in rows:  # the option column starts at the header's "option" in every row
        assert ln[col - 1] == " " and ln[col] != " ", ln
    assert "algorithm=fused_pair_256x256" in lines[3]
    assert set(lines[1]) == {"-"} and len(lines[1]) >= len(header) - 2
    assert lines[-1].startswith("total: 2 cases, 1 passed, 1 mismatched, 0 errors, 1 skipped ops")


def test_long_option_labels_are_printed_whole():
    """--detail's option column is as wide as the longest label (at least 36): a TE variant tag such as
    ``te_variant=4over6:mae:fast:G256+row_scaled`` (42 characters) was cut at 36."""
    st = Stats()
    tag = "4over6:mae:fast:G256+row_scaled"
    st.add(dict(backend="torch-te", op="quantize", index=0, status="pass", seconds=0.5, tags={"te_variant": tag}))
    lines = st.table(detail=True).splitlines()
    col = lines[0].index("option")
    row = next(ln for ln in lines if "te_variant=" in ln)
    assert row[col:].startswith(f"te_variant={tag} ") and row.split()[-3:] == ["1", "1", "0"]


def test_default_table_is_one_row_per_backend_and_op():
    st = Stats()
    for backend, op, status in [("device:cuda:0", "grouped_gemm_exact", "pass"), ("oracle", "quantize", "mismatch"),
                                ("oracle", "quantize", "pass")]:
        st.add(dict(backend=backend, op=op, index=0, status=status, seconds=0.5,
                    tags={"algorithm": "fused_pair_256x256", "values": "normal"}, extra={"equal_to_exact": 3}))
    st.skipped.append(dict(backend="torchao", op="quantize", reason="torchao missing"))
    lines = st.table().splitlines()
    assert lines[0].split() == ["backend", "op", "cases", "pass", "mismatch", "error", "cases/s"]
    assert lines[2].split() == ["device:cuda:0", "grouped_gemm_exact", "1", "1", "0", "0", "2.0"]
    assert lines[3].split() == ["oracle", "quantize", "2", "1", "1", "0", "2.0"]
    assert lines[4].split()[:3] == ["torchao", "quantize", "SKIPPED:"] and lines[4].endswith("torchao missing")
    assert len(lines) == 7 and lines[-1].startswith("total: 3 cases, 2 passed, 1 mismatched, 0 errors, 1 skipped ops")
    assert "algorithm=" not in "\n".join(lines) and "equal_to_exact" not in "\n".join(lines)
    for ln in lines[2:4]:  # the counts end under their headers' last letters
        for head in ("cases", "pass", "mismatch", "error"):
            end = lines[0].index(f" {head} ") + len(head)
            assert ln[end].isdigit() and ln[end + 1] == " ", (head, ln)

def _docs(statuses_per_shard, n=None, seeds=None):
    n = n or len(statuses_per_shard)
    docs = []
    for i, statuses in enumerate(statuses_per_shard):
        st = Stats()
        for j, status in enumerate(statuses):
            st.add(dict(backend="b", op="e2m1", index=i + n * j, status=status, seconds=0.1, tags={"k": "v"}))
        config = dict(seed=(seeds[i] if seeds else 0), shard=[i, n], max_cases=None, ops=None, backends_used=["b"])
        code = 2 if not statuses else int(any(s != "pass" for s in statuses))
        docs.append((f"r{i}", st.to_json(config, code)))
    return docs


def test_merge_counts_the_mismatches_of_every_shard():
    """Shard 0/2 mismatched one case, shard 1/2 passed two: the merge has 3 cases, 1 mismatched, exit code 1
    (docs: 1 when any case mismatched or raised)."""
    _, doc, problems = merge_reports(_docs([["mismatch"], ["pass", "pass"]]))
    assert problems == []
    assert doc["totals"] == dict(cases=3, passed=2, mismatched=1, errors=0, skipped_ops=0)
    assert doc["exit_code"] == 1


def test_merge_with_a_shard_that_ran_no_case_exits_2():
    """docs: merge's exit code is 1 on a mismatch or error, else 2 when a shard is missing or ran no case, else 0.
    Shard 0/2 ran no case (its exit code 2), shard 1/2 passed: 2, with a problem naming shard 0/2."""
    _, doc, problems = merge_reports(_docs([[], ["pass"]]))
    assert doc["exit_code"] == 2 and len(problems) == 1 and "shard 0/2 ran no case" in problems[0]


def test_merge_refuses_different_seeds_and_a_shard_given_twice():
    """docs: merge refuses reports of different seeds, and a shard given twice (ReportError, exit code 2)."""
    import pytest

    from conformance.report import ReportError

    with pytest.raises(ReportError, match="seeds"):
        merge_reports(_docs([["pass"], ["pass"]], seeds=[0, 1]))
    d0, d1 = _docs([["pass"], ["pass"]])
    with pytest.raises(ReportError, match="twice"):
        merge_reports([d0, ("r0-again", d0[1]), d1])
