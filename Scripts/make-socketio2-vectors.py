"""Writes Tests/SocketIOConformanceTests/Resources/socketio2-vectors.json: Engine.IO protocol 3 and
Socket.IO protocol 4 encodings (socket.io 2.x servers) made by the pinned reference peer,
python-engineio 3.14.2 and python-socketio 4.6.1 (Scripts/requirements-sio2.txt).

Run: .venv-sio2/bin/python Scripts/make-socketio2-vectors.py   (Scripts/test.sh creates .venv-sio2)
Binary values are written as {"$bin": "<hex>"}; encodings that are bytes, as hex.
"""
import json
import os

import engineio
import socketio
from engineio import packet as eio_packet, payload as eio_payload
from socketio import packet as sio_packet

assert engineio.__version__ == "3.14.2" and socketio.__version__ == "4.6.1", (engineio.__version__, socketio.__version__)
NAMES = {0: "open", 1: "close", 2: "ping", 3: "pong", 4: "message", 5: "upgrade", 6: "noop"}


def data_json(data):
    if isinstance(data, (bytes, bytearray)):
        return {"$bin": bytes(data).hex()}
    if isinstance(data, list):
        return [data_json(d) for d in data]
    if isinstance(data, dict):
        return {k: data_json(v) for k, v in data.items()}
    return data


def eio_case(packet_type, data=None):
    p = eio_packet.Packet(packet_type, data=data)
    websocket = p.encode(b64=False, always_bytes=False)
    return {
        "type": NAMES[packet_type],
        "data": data_json(data),
        # What a polling payload carries (the client asks for b64=1).
        "text": p.encode(b64=True).decode("utf-8"),
        # A WebSocket frame: text, or a binary frame's bytes.
        "websocket": {"binary": websocket.hex()} if isinstance(websocket, bytes) else {"text": websocket},
    }


packets = [
    eio_case(eio_packet.OPEN, {"sid": "abc", "upgrades": ["websocket"], "pingTimeout": 60000, "pingInterval": 25000}),
    eio_case(eio_packet.CLOSE),
    eio_case(eio_packet.PING),
    eio_case(eio_packet.PING, "probe"),
    eio_case(eio_packet.PONG, "probe"),
    eio_case(eio_packet.MESSAGE, "hello"),
    eio_case(eio_packet.MESSAGE, "2[\"chat\",\"é😀\"]"),
    eio_case(eio_packet.MESSAGE, b"\x00\x01\x02\xff"),
    eio_case(eio_packet.MESSAGE, b""),
    eio_case(eio_packet.UPGRADE),
    eio_case(eio_packet.NOOP),
]


def payload_case(items):
    ps = [eio_packet.Packet(t, data=d) for t, d in items]
    return {
        "packets": [{"type": NAMES[t], "data": data_json(d)} for t, d in items],
        # The text framing (b64=1): python-engineio writes each length as the packet's UTF-8 bytes.
        "text": eio_payload.Payload(packets=ps).encode(b64=True).decode("utf-8"),
        # The XHR2 binary framing (no b64).
        "binary": eio_payload.Payload(packets=ps).encode(b64=False).hex(),
    }


payloads = [
    payload_case([(eio_packet.MESSAGE, "hello")]),
    payload_case([(eio_packet.OPEN, {"sid": "abc", "upgrades": [], "pingTimeout": 5000, "pingInterval": 1000}), (eio_packet.MESSAGE, "0")]),
    payload_case([(eio_packet.MESSAGE, "2[\"a\"]"), (eio_packet.MESSAGE, b"\x01\x02"), (eio_packet.NOOP, None)]),
    payload_case([(eio_packet.PING, None), (eio_packet.PONG, None), (eio_packet.MESSAGE, "x" * 120)]),
]


def sio_case(packet_type, data=None, namespace=None, id=None):
    p = sio_packet.Packet(packet_type, data=data, namespace=namespace, id=id)
    encoded = p.encode()
    if isinstance(encoded, list):
        text, attachments = encoded[0], [a.hex() for a in encoded[1:]]
    else:
        text, attachments = encoded, []
    return {"type": p.packet_type, "namespace": namespace or "/", "id": id, "data": data_json(data),
            "text": text, "attachments": attachments}


SIO = sio_packet
sio_packets = [
    sio_case(SIO.CONNECT),
    sio_case(SIO.CONNECT, namespace="/chat"),
    sio_case(SIO.DISCONNECT, namespace="/chat"),
    sio_case(SIO.DISCONNECT),
    sio_case(SIO.EVENT, ["message", "hi", 1, 2.5, True, None]),
    sio_case(SIO.EVENT, ["message", {"a": [1, 2]}], namespace="/chat"),
    sio_case(SIO.EVENT, ["ask"], id=12),
    sio_case(SIO.EVENT, ["ask", "x"], namespace="/chat", id=7),
    sio_case(SIO.ACK, ["ok"], id=12),
    sio_case(SIO.ACK, [], namespace="/chat", id=3),
    sio_case(SIO.EVENT, ["blob", b"\x01\x02\x03"]),
    sio_case(SIO.EVENT, ["blobs", {"one": b"\xff", "two": [b"\x00", "text"]}], namespace="/chat", id=4),
    sio_case(SIO.ACK, [b"\x10\x20"], id=5),
    sio_case(SIO.ERROR, "not allowed", namespace="/chat"),
    sio_case(SIO.ERROR, {"message": "bad token"}, namespace="/chat"),
    sio_case(SIO.ERROR, None, namespace="/chat"),
    sio_case(SIO.EVENT, ["big", 2**53 + 1, 2**63 - 1, -2**63, 2**64 - 1]),
    sio_case(SIO.EVENT, ["unicode", "é😀"]),
]

out = {
    "source": "python-engineio 3.14.2 and python-socketio 4.6.1 (Scripts/make-socketio2-vectors.py)",
    "engineio3Packets": packets,
    "engineio3Payloads": payloads,
    "socketio4Packets": sio_packets,
}
target = os.path.join(os.path.dirname(__file__), "..", "Tests", "SocketIOConformanceTests", "Resources", "socketio2-vectors.json")
with open(target, "w") as f:
    json.dump(out, f, indent=1, ensure_ascii=False)
    f.write("\n")
print("wrote", os.path.normpath(target))
