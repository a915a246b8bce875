"""Reading fuseoptrun --dry-run's line: ``NAME=value ... mpiexec ...
-genvlist NAME,... ...`` (the values travel in mpiexec's environment)."""


def given_environment(words):
    """The variables the line gives mpiexec (NAME=value words before it),
    checked to be exactly those its -genvlist passes on to the ranks."""
    env = dict(w.split("=", 1) for w in words[:next(i for i, w in enumerate(words)
                                                    if "=" not in w)])
    assert "-genv" not in words
    assert sorted(words[words.index("-genvlist") + 1].split(",")) == sorted(env)
    return env
