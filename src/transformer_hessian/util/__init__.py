"""Utilities below everything else (no model, no mathematics): one concept per module.

- :mod:`.files`: atomic writes, JSON and text, sha256 digests (no digest sidecar);
- :mod:`.io`: the result formats, each written with a digest sidecar and read back verified;
- :mod:`.tempfiles`: temporary files of interrupted writes, found and removed;
- :mod:`.env`: device choice, provenance (commit, package versions, device), logging, threads;
- :mod:`.resources`: memory available to this process (cgroup limits respected), parameter counts;
- :mod:`.sandbox`: a child process under a memory cap, its peak resident memory;
- :mod:`.progress`: progress lines of long steps; :mod:`.numfmt`, :mod:`.tablefmt`: numbers and tables;
- :mod:`.datanames`: the one table of data sets and every wording of their names;
- :mod:`.claim_schema`: the verdict words and keys of a claim row.
"""
