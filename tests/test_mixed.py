"""Mixed-framework jobs: 2 PyTorch + 2 Keras ranks in one fuseoptrun (MPMD),
and one process using both bindings."""


def test_mixed_cluster_trains_like_one_process(run_mpmd):
    # Broadcast from a PyTorch root and from a Keras root, fit and a custom
    # loop on the Keras side; every rank ends equal to the NumPy reference.
    out = run_mpmd([(2, "mixed_torch.py", "train"), (2, "mixed_keras.py", "train")],
                   timeout=300).output
    for rank in (0, 1):
        assert "[rank %d] mixed torch train ok" % rank in out, out
    for rank in (2, 3):
        assert "[rank %d] mixed keras train ok" % rank in out, out


def test_mixed_cluster_layout_mismatch_fails_clearly_everywhere(run_mpmd):
    out = run_mpmd([(2, "mixed_torch.py", "mismatch"), (2, "mixed_keras.py", "mismatch")],
                   timeout=300).output
    for rank in (0, 1):
        assert "[rank %d] mixed torch mismatch ok" % rank in out, out
    for rank in (2, 3):
        assert "[rank %d] mixed keras mismatch ok" % rank in out, out


def test_one_process_uses_both_bindings(run_ranks):
    run_ranks(2, "mixed_both.py", timeout=240)
