"""Statement line from a raw device: a UTF-8 file read in small chunks from an unbuffered
file, each chunk fed to an incremental decoder (a multi-byte character may be split between
chunks), the text joined and the amount after the colon parsed; the terminal's id comes from
the environment.

Truth: the amount comes from every chunk read (the joined text is made of all of them).
Decoys: the terminal id.
"""

import codecs
import json
import os
import sys

CHUNK = 7  # <- allow:chunk


def main():
    terminal = os.environ["TERMINAL_ID"]  # <- decoy:terminal
    decoder = codecs.getincrementaldecoder("utf-8")()  # <- allow:codec
    parts = []
    with open(sys.argv[1], "rb", buffering=0) as fh:  # <- allow:open
        while True:
            chunk = fh.read(CHUNK)  # <- origin:chunks
            parts.append(decoder.decode(chunk, final=not chunk))
            if not chunk:
                break
    text = "".join(parts)  # <- allow:joiner
    statement = {"terminal": terminal, "payee": text.split(":")[0]}
    statement["amount"] = float(text.split(":")[1].replace(",", "."))  # <- allow:parse
    print(json.dumps(statement))  # <- trace


main()
