"""What fuseoptrun's elastic driver and the ranks of an elastic job share:
the commit files, the host-update notice and the exit code of a planned
reset. Native-free, so that the launcher uses it without loading the core.

MPI cannot shrink or grow a running world, so a reset ends the MPI job and
the driver starts a new one (fuseopt/launcher/elastic/driver.py). What
survives from one job to the next is the *commit store*: the driver gives
every rank ``$FUSEOPT_ELASTIC_DIR``, and one rank per host (its lowest local
rank) writes each committed state to ``<dir>/<host name>/commit.fuseopt``.
Host names key the files because emulated hosts (and NFS home directories)
may share one file system; a lost host loses its copy, a new host has none,
and the newest copy of any survivor wins (:func:`choose_newest`).

A commit file is ``MAGIC``, an 8-byte big-endian header length, a JSON
header (generation, format, payload length and CRC-32) and the payload,
which only the framework binding reads, with its own loader that never runs
code from the file. The checksum is verified before the payload is handed
on, so a truncated or corrupt file is a clear error, never a crash in a
deserializer. When the driver gives the job a key (``$FUSEOPT_JOB_KEY``,
through the environment, never argv), the header also holds a keyed
BLAKE2b MAC of the header fields and the payload, and a copy without the
right MAC is refused: a user who can write the store's directory (or made
it first) cannot plant a newer generation for every rank to resume from.
The store's directories are the job's own (base/private_dir.py).
"""
import hashlib
import hmac
import json
import os
import socket
import struct
import time
import zlib

from ..base.atomic_file import write_atomically

ELASTIC_DIR_ENV = "FUSEOPT_ELASTIC_DIR"      # the commit store's root (set by the driver)
RESET_COUNT_ENV = "FUSEOPT_ELASTIC_RESETS"   # how many resets came before this job
JOB_KEY_ENV = "FUSEOPT_JOB_KEY"              # hex; MACs the commits (set by the driver)
NOTICE_FILE = "hosts-updated.json"           # in $FUSEOPT_LAUNCH_DIR, written by the driver
COMMIT_FILE = "commit.fuseopt"
MAGIC = b"FUSEOPT-ELASTIC-COMMIT/1\n"

# A rank ends with this code when the job must be restarted rather than
# failed: the hosts changed (it committed first) or a peer was lost. 75 is
# EX_TEMPFAIL: "try again later".
RESET_EXIT_CODE = 75


class CommitFileError(ValueError):
    """A commit file that cannot be used (truncated, corrupt, foreign)."""


def store_dir(environ=None):
    """The commit store's root, or None when not run by the elastic driver."""
    environ = os.environ if environ is None else environ
    return environ.get(ELASTIC_DIR_ENV) or None


def job_key(environ=None):
    """The job's commit key (bytes), or None when the driver gave none."""
    value = (os.environ if environ is None else environ).get(JOB_KEY_ENV)
    return bytes.fromhex(value) if value else None


def new_job_key():
    """A fresh key for a driver to give its ranks (as JOB_KEY_ENV)."""
    return os.urandom(32).hex()


def _mac(key, generation, fmt, payload):
    m = hashlib.blake2b(key=key, digest_size=32)
    m.update(json.dumps([int(generation), fmt, len(payload)]).encode("utf-8"))
    m.update(payload)
    return m.hexdigest()


def commit_path(root, host=None):
    """This host's commit file under ``root``."""
    return os.path.join(root, host or socket.gethostname(), COMMIT_FILE)


def encode_commit(generation, fmt, payload, key=None):
    """The pieces of a commit file holding ``payload`` (bytes): written one
    after the other, so a large payload is not copied to be joined. CRC-32,
    not a cryptographic hash: it guards against truncation and damage (4x
    faster than SHA-256 here), not against an attacker who can write the
    file, who could not make the payload's safe loader run code anyway."""
    fields = {"generation": int(generation), "format": fmt, "length": len(payload),
              "crc32": zlib.crc32(payload)}
    if key is not None:
        fields["mac"] = _mac(key, generation, fmt, payload)
    header = json.dumps(fields).encode("utf-8")
    return [MAGIC + struct.pack(">Q", len(header)) + header, payload]


def decode_commit(data, where="commit file", key=None):
    """(header dict, payload bytes) of a commit file's bytes, checksum
    verified; CommitFileError saying what is wrong otherwise."""
    if not data.startswith(MAGIC):
        raise CommitFileError("%s is not a fuseopt elastic commit (bad magic)" % where)
    start = len(MAGIC) + 8
    if len(data) < start:
        raise CommitFileError("%s is truncated (no header)" % where)
    (length,) = struct.unpack(">Q", data[len(MAGIC):start])
    try:
        header = json.loads(data[start:start + length].decode("utf-8"))
        generation, expected, digest = header["generation"], header["length"], header["crc32"]
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        raise CommitFileError("%s has a corrupt header" % where) from None
    payload = data[start + length:]
    if len(payload) != expected:
        raise CommitFileError("%s is truncated: %d of %d payload bytes"
                              % (where, len(payload), expected))
    if zlib.crc32(payload) != digest:
        raise CommitFileError("%s is corrupt: checksum mismatch" % where)
    if not isinstance(generation, int) or generation < 1:
        raise CommitFileError("%s has a bad generation %r" % (where, generation))
    if key is not None and not hmac.compare_digest(
            str(header.get("mac", "")), _mac(key, generation, header.get("format"), payload)):
        raise CommitFileError("%s was not written by this job (its MAC does not match the job's "
                              "key): refused" % where)
    return header, payload


def write_commit(path, pieces):
    """Replaces ``path`` with the ``pieces`` (bytes) atomically; not fsynced
    (see atomic_file.write_atomically)."""
    write_atomically(path, lambda f: [f.write(piece) for piece in pieces], durable=False,
                     private=True)


def read_commit(path, key=None):
    """(generation, header, payload) of the file at ``path``; None when there
    is none; CommitFileError when it is unusable."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise CommitFileError("cannot read %s: %s" % (path, e.strerror or e)) from None
    header, payload = decode_commit(data, path, key)
    return header["generation"], header, payload


def choose_newest(reports):
    """Which copy wins. ``reports``: one (rank, generation or None, error or
    None) per rank that looked at a file. Returns (owner rank, generation),
    the newest usable copy (lowest rank among equals), or (None, 0) when
    there is none; and the list of errors of unusable copies, so the caller
    can fall back to an older copy loudly, or fail when nothing is left."""
    usable = [(gen, rank) for rank, gen, err in reports if gen and not err]
    errors = [err for _, _, err in reports if err]
    if not usable:
        return (None, 0), errors
    generation = max(gen for gen, _ in usable)
    owner = min(rank for gen, rank in usable if gen == generation)
    return (owner, generation), errors


def write_notice(launch_dir, hosts):
    """The driver tells the running job that its hosts changed."""
    notice = {"time": time.time(), "hosts": ["%s:%d" % h for h in hosts]}
    write_atomically(os.path.join(launch_dir, NOTICE_FILE),
                     lambda f: f.write(json.dumps(notice).encode("utf-8")), durable=False,
                     private=True)


def notice_time(launch_dir):
    """When the driver last said the hosts changed (0.0: never, or this rank
    cannot see the launch directory, as on hosts other than fuseoptrun's)."""
    if not launch_dir:
        return 0.0
    try:
        with open(os.path.join(launch_dir, NOTICE_FILE)) as f:
            return float(json.load(f)["time"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0.0
