"""The conformance summary table: one row per backend and op (per option with ``detail``); columns line up whatever
the backend and op names."""

from conformance.report import Stats


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
