"""An error raised on one rank travels as (class name, message) and is
raised again on the others: as its own class where that is Python's,
fuseopt's or pickle's, else as RuntimeError naming it; a class name from
the wire is only ever looked up, never imported."""
import errno
import pickle
import sys

from fuseopt.training.checkpoint import CheckpointError
from fuseopt.base.errors import InvalidArgumentError
from fuseopt.base.portable_errors import describe, rebuild


def round_trip(error, context="rank 0 could not write checkpoint 'c.pt'"):
    kind, message = describe(error, context)
    assert isinstance(kind, str) and isinstance(message, str)  # plain data on the wire
    return rebuild((kind, message))


def test_known_classes_come_back_as_themselves_with_the_context():
    full = round_trip(OSError(errno.ENOSPC, "No space left on device"))
    assert type(full) is OSError
    assert str(full) == ("rank 0 could not write checkpoint 'c.pt': "
                         "[Errno 28] No space left on device")
    for error in (RuntimeError("unexpected pos"), TypeError("cannot pickle 'lock'"),
                  InvalidArgumentError("extra is a set"), CheckpointError("truncated"),
                  pickle.PicklingError("no"), FileNotFoundError("no such file")):
        again = round_trip(error)
        assert type(again) is type(error), (error, again)
        assert str(again).endswith(str(error)) and str(again).startswith("rank 0 ")


def test_other_classes_arrive_as_runtime_error_naming_them():
    class DiskQuotaError(Exception):
        pass
    again = round_trip(DiskQuotaError("over quota"))
    assert type(again) is RuntimeError
    assert "DiskQuotaError: over quota" in str(again)
    # a class whose constructor wants more than a message
    again = round_trip(UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"))
    assert type(again) is RuntimeError and "invalid start byte" in str(again)


def test_a_class_name_from_the_wire_is_never_imported(tmp_path, monkeypatch):
    for kind in ("os.system", "subprocess.Popen", "builtins.eval", "fuseopt.api.ops.allreduce",
                 "builtins.BaseException", "builtins.SystemExit", "nonsense"):
        again = rebuild((kind, "message"))
        assert type(again) is RuntimeError and str(again) == "message", kind
    # A module not imported yet, whose import would leave a mark: rebuilding
    # an error that names a class in it must neither import it nor run it.
    marker = tmp_path / "imported"
    (tmp_path / "planted_by_a_peer.py").write_text(
        "open(%r, 'w').close()\nclass Boom(Exception):\n    pass\n" % str(marker))
    monkeypatch.syspath_prepend(str(tmp_path))
    again = rebuild(("planted_by_a_peer.Boom", "message"))
    assert type(again) is RuntimeError and str(again) == "message"
    assert "planted_by_a_peer" not in sys.modules and not marker.exists()
