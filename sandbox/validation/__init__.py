"""The programs `sealtrace validate` checks the provenance engine against, and their answers.

`cases` is the manifest. `programs/` holds one ordinary program per case; they are run as
scripts by the validator, never imported.
"""
