"""Exchange rate over asyncio streams: the program opens a connection with
asyncio.open_connection, asks for a rate and for the service's status, and converts an
amount from the command line.

Truth: the converted amount comes from the rate reply (read by the event loop into the
stream's buffer while asyncio.run drives it) and the amount. Decoys: the status reply, read
the same way.
"""

import asyncio
import json
import sys


async def main(port, amount):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)  # <- allow:connection
    writer.write(b"RATE EUR\n")  # <- allow:request
    await writer.drain()
    rate = float((await reader.readline()).decode().split()[1])
    writer.write(b"STATUS\n")
    await writer.drain()
    status = (await reader.readline()).decode().strip()
    writer.close()
    await writer.wait_closed()
    converted = {"status": status}
    converted["nok"] = round(amount * rate, 2)  # <- allow:pence
    print(json.dumps(converted))  # <- trace


asyncio.run(main(int(sys.argv[1]), float(sys.argv[2])))  # <- origin:loop decoy:status
