"""The conformance summary table: columns line up whatever the backend and op names."""

from conformance.report import Stats


def test_summary_columns_line_up_with_long_names():
    st = Stats()
    for backend, op, status in [("device:cuda:0", "grouped_gemm_exact", "pass"), ("oracle", "quantize", "mismatch")]:
        st.add(dict(backend=backend, op=op, index=0, status=status, seconds=0.5,
                    tags={"algorithm": "fused_pair_256x256", "values": "normal"}))
    st.skipped.append(dict(backend="(none)", op="layout", reason="no backend"))
    lines = st.table().splitlines()
    header = lines[0]
    col = header.index("option")
    rows = [ln for ln in lines[2:] if not ln.startswith("-") and not ln.startswith("total")]
    assert len(rows) == 2 * 3 + 1  # (all) + two option rows per task, one skipped op
    for ln in rows:  # the option column starts at the header's "option" in every row
        assert ln[col - 1] == " " and ln[col] != " ", ln
    assert "algorithm=fused_pair_256x256" in lines[3]
    assert set(lines[1]) == {"-"} and len(lines[1]) >= len(header) - 2
    assert lines[-1].startswith("total: 2 cases, 1 passed, 1 mismatched, 0 errors, 1 skipped ops")
