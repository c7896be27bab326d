"""Price quote over TCP: the program asks a quote service for the bid on a currency pair
through a socket's file interface (makefile().readline()), pings it for its status, and
prices an order of QTY units (the command line).

Truth: the order's value comes from the quote reply and the quantity. Decoys: the status
reply, read by another line from the same socket's buffer.
"""

import json
import socket
import sys


def main():
    qty = int(sys.argv[2])
    address = ("127.0.0.1", int(sys.argv[1]))  # <- allow:address
    with socket.create_connection(address, timeout=30) as sock:  # <- allow:connect
        replies = sock.makefile("rb")  # <- allow:reader
        sock.sendall(b"QUOTE EURNOK\n")  # <- allow:request
        quote = replies.readline().decode().split()  # <- origin:quote
        sock.sendall(b"STATUS\n")
        status = replies.readline().decode().strip()  # <- decoy:status
    order = {"pair": quote[0], "status": status}
    order["value"] = float(quote[1]) * qty
    print(json.dumps(order))  # <- trace


main()
