"""The programs `sealtrace validate` checks the provenance engine against, and their answers.

`cases` is the manifest of the planted root causes, `corpus` the manifest of the
ground-truth corpus, `truth` the format of a corpus program's truth, and `inputs` what a
program is run with (its arguments, environment, files and loopback peer). `programs/` holds
one ordinary program per case and per corpus entry; they are run as scripts by the
validator, never imported.
"""
