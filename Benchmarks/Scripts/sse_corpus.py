#!/usr/bin/env python3
# Copied from the project's shared conformance data (shared/conformance/sse_corpus.py), unchanged below this line.
"""Deterministic SSE benchmark corpus generator.

Usage: python3 sse_corpus.py [--mib 50] [--seed 20261121] [--out DIR]
Writes DIR/corpus-lf.sse, DIR/corpus-crlf.sse and DIR/manifest.json.

Recipe (per generated block, weights out of 100; one RNG = random.Random(seed)):
  40  short single-line data:   'data: {"seq":N,"v":"<16..48 alnum>"}' LF LF
  20  multi-line data:          2..6 x 'data: <20..80 alnum/space>' then LF
  20  id + event + data:        'id: N' LF 'event: <one of 5 types>' LF 'data: {"seq":N,"p":"<30..120>"}' LF LF
  10  comment line:             ': keepalive N' LF   (no blank line; the next block follows directly)
   5  comment-only block:       ': ping' LF LF        (blank line with empty data -> nothing dispatched)
   3  large single-line data:   'data: <1024..4096 alnum>' LF LF
   2  retry block:              'retry: <1000..9999>' LF LF (no data -> nothing dispatched)
  5% of data line values get the suffix ' \u20ac\u8c46\u8150' (multi-byte UTF-8).
Generation stops at the first block boundary at or above --mib MiB (LF variant).
The CRLF variant is the LF variant with every LF replaced by CR LF (same events).
Expected counts follow the WHATWG rules (an event is dispatched iff its data buffer is non-empty).
"""
import argparse, hashlib, json, os, random, string

ALNUM = string.ascii_letters + string.digits
TYPES = ["update", "patch", "delete", "presence", "message"]

def rstr(rng, lo, hi, alphabet=ALNUM):
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(lo, hi)))

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=float, default=50)
    ap.add_argument("--seed", type=int, default=20261121)
    ap.add_argument("--out", default=".")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    target = int(a.mib * 1024 * 1024)
    parts, size = [], 0
    ev = com = data_bytes = seq = 0
    kinds = dict(short=0, multi=0, idevent=0, comment=0, commentblock=0, large=0, retry=0)
    kbytes = dict.fromkeys(kinds, 0)

    def val(v):
        return v + " \u20ac\u8c46\u8150" if rng.random() < 0.05 else v

    prev = dict(kinds)
    while size < target:
        seq += 1
        r = rng.randrange(100)
        if r < 40:
            d = val('{"seq":%d,"v":"%s"}' % (seq, rstr(rng, 16, 48)))
            blk = "data: " + d + "\n\n"; ev += 1; data_bytes += len(d.encode()); kinds["short"] += 1
        elif r < 60:
            lines = [val(rstr(rng, 20, 80, ALNUM + " ")) for _ in range(rng.randint(2, 6))]
            blk = "".join("data: " + l + "\n" for l in lines) + "\n"
            ev += 1; data_bytes += len("\n".join(lines).encode()); kinds["multi"] += 1
        elif r < 80:
            d = val('{"seq":%d,"p":"%s"}' % (seq, rstr(rng, 30, 120)))
            blk = "id: %d\nevent: %s\ndata: %s\n\n" % (seq, rng.choice(TYPES), d)
            ev += 1; data_bytes += len(d.encode()); kinds["idevent"] += 1
        elif r < 90:
            blk = ": keepalive %d\n" % seq; com += 1; kinds["comment"] += 1
        elif r < 95:
            blk = ": ping\n\n"; com += 1; kinds["commentblock"] += 1
        elif r < 98:
            d = rstr(rng, 1024, 4096)
            blk = "data: " + d + "\n\n"; ev += 1; data_bytes += len(d); kinds["large"] += 1
        else:
            blk = "retry: %d\n\n" % rng.randint(1000, 9999); kinds["retry"] += 1
        b = blk.encode()
        kind = [k for k in kinds if kinds[k] != prev.get(k)][0]
        kbytes[kind] += len(b); prev.update(kinds)
        parts.append(b); size += len(b)
    lf = b"".join(parts)
    # a trailing bare comment line would leave no pending event; the stream ends on a block boundary.
    crlf = lf.replace(b"\n", b"\r\n")
    os.makedirs(a.out, exist_ok=True)
    man = dict(seed=a.seed, mib=a.mib, blocks=seq, kinds=kinds, kind_bytes_lf=kbytes, expected_events=ev,
               expected_comments=com, expected_data_utf8_bytes=data_bytes, files={})
    for name, blob in (("corpus-lf.sse", lf), ("corpus-crlf.sse", crlf)):
        open(os.path.join(a.out, name), "wb").write(blob)
        man["files"][name] = dict(bytes=len(blob), sha256=hashlib.sha256(blob).hexdigest(),
                                  lf=blob.count(b"\n"), cr=blob.count(b"\r"))
    open(os.path.join(a.out, "manifest.json"), "w").write(json.dumps(man, indent=1))
    print(json.dumps(man, indent=1))

if __name__ == "__main__":
    main()
