"""Order desk over asyncio: a stream server (asyncio.start_server) greets one client, reads
its order line ("ORDER sku qty"), prices it from the catalogue database and replies.

Truth: the reply's total comes from the order line (read by the event loop into the
stream's buffer while asyncio.run drives it) and the price row. Decoys: the client's hello
line, read the same way before the order, and the greeting. Forward, from the quantity: it
reaches the reply sent on the socket, and not the greeting sent before it.
"""

import asyncio
import json
import sqlite3
import sys

db = sqlite3.connect(sys.argv[1])  # <- allow:db
finished = None  # set by serve(): the server stops after one client


async def handle(reader, writer):
    await reader.readline()
    writer.write(b"WELCOME\n")  # <- decoy:welcome
    _, sku, qty = (await reader.readline()).decode().split()
    sql = "select cents from catalogue where sku = ?"  # <- allow:sql
    (cents,) = db.execute(sql, (sku,)).fetchone()  # <- origin:price
    reply = {"sku": sku}
    reply["total"] = cents * int(qty)
    writer.write(json.dumps(reply).encode() + b"\n")  # <- trace allow:reply
    await writer.drain()
    writer.close()
    finished.set()


async def serve(port):
    global finished
    finished = asyncio.Event()
    server = await asyncio.start_server(handle, "127.0.0.1", port)
    async with server:
        await finished.wait()


asyncio.run(serve(int(sys.argv[2])))  # <- origin:loop decoy:hello
