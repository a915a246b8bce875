"""Mixed-framework jobs: 2 PyTorch + 2 Keras ranks in one fuseoptrun (MPMD),
and one process using both bindings."""


def run_both_halves(run_mpmd, scenario):
    out = run_mpmd([(2, "mixed_torch.py", scenario), (2, "mixed_keras.py", scenario)],
                   timeout=300).output
    for rank, framework in ((0, "torch"), (1, "torch"), (2, "keras"), (3, "keras")):
        assert "[rank %d] mixed %s %s ok" % (rank, framework, scenario) in out, out


def test_mixed_cluster_trains_like_one_process(run_mpmd):
    # Broadcast from a PyTorch root and from a Keras root, fit and a custom
    # loop on the Keras side; every rank ends equal to the NumPy reference.
    run_both_halves(run_mpmd, "train")


def test_mixed_cluster_layout_mismatch_fails_clearly_everywhere(run_mpmd):
    run_both_halves(run_mpmd, "mismatch")


def test_one_process_uses_both_bindings(run_ranks):
    run_ranks(2, "mixed_both.py", timeout=240)
