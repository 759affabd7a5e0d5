#!/usr/bin/env python3
"""Extracts one member of a PyPI wheel with HTTP range requests, without downloading the whole wheel.

    python3 benches/torch/wheel_member.py PACKAGE VERSION MEMBER OUT

Picks the cp311 manylinux_2_28 x86_64 wheel of VERSION (which must be the newest, since it reads PyPI's
/pypi/PACKAGE/json), reads the zip's central directory (zip64 aware) and the member, checks the member's CRC-32,
writes it to OUT and prints the wheel's name and PyPI sha256 and the member's sha256 (stdlib only).
"""

import hashlib
import json
import struct
import sys
import urllib.parse
import urllib.request
import zlib


def get(url, start, end):
    req = urllib.request.Request(url, headers={"Range": f"bytes={start}-{end}"})
    with urllib.request.urlopen(req, timeout=60) as r:
        assert r.status == 206, r.status
        return r.read()

def main(pkg, ver, member, out):
    meta = json.load(urllib.request.urlopen(f"https://pypi.org/pypi/{pkg}/json", timeout=60))
    assert meta["info"]["version"] == ver, meta["info"]["version"]
    whl = [u for u in meta["urls"] if u["filename"].endswith("manylinux_2_28_x86_64.whl") and "cp311" in u["filename"]]
    if not whl:
        whl = [u for u in meta["urls"] if u["filename"].endswith(".whl") and "cp311" in u["filename"] and "x86_64" in u["filename"]]
    w = whl[0]
    url, size = urllib.parse.urljoin(f"https://pypi.org/pypi/{pkg}/json", w["url"]), w["size"]
    tail = get(url, size - 65536, size - 1)
    eocd = tail.rfind(b"PK\x05\x06")
    cd_size, cd_off = struct.unpack("<II", tail[eocd + 12: eocd + 20])
    if cd_off == 0xFFFFFFFF:  # zip64
        loc = tail.rfind(b"PK\x06\x07")
        z64off = struct.unpack("<Q", tail[loc + 8: loc + 16])[0]
        rec = get(url, z64off, z64off + 55)
        cd_size, cd_off = struct.unpack("<QQ", rec[40:56])
    cd = get(url, cd_off, cd_off + cd_size - 1)
    i = 0
    while i < len(cd):
        assert cd[i:i+4] == b"PK\x01\x02"
        method, = struct.unpack("<H", cd[i+10:i+12])
        crc, csize, usize = struct.unpack("<III", cd[i+16:i+28])
        nlen, elen, clen = struct.unpack("<HHH", cd[i+28:i+34])
        lho, = struct.unpack("<I", cd[i+42:i+46])
        name = cd[i+46:i+46+nlen].decode()
        extra = cd[i+46+nlen:i+46+nlen+elen]
        if lho == 0xFFFFFFFF or csize == 0xFFFFFFFF:
            j = 0
            while j < len(extra):
                hid, hlen = struct.unpack("<HH", extra[j:j+4]); data = extra[j+4:j+4+hlen]
                if hid == 1:
                    vals = list(struct.unpack("<" + "Q" * (hlen // 8), data)); k = 0
                    if usize == 0xFFFFFFFF: usize = vals[k]; k += 1
                    if csize == 0xFFFFFFFF: csize = vals[k]; k += 1
                    if lho == 0xFFFFFFFF: lho = vals[k]; k += 1
                j += 4 + hlen
        if name == member:
            hdr = get(url, lho, lho + 29)
            n2, e2 = struct.unpack("<HH", hdr[26:30])
            data = get(url, lho + 30 + n2 + e2, lho + 30 + n2 + e2 + csize - 1)
            raw = zlib.decompress(data, -15) if method == 8 else data
            assert zlib.crc32(raw) == crc
            open(out, "wb").write(raw)
            print(json.dumps({"wheel": w["filename"], "wheel_sha256": w["digests"]["sha256"], "member": member, "crc32": "%08x" % crc, "sha256": hashlib.sha256(raw).hexdigest(), "bytes": len(raw)}))
            return
        i += 46 + nlen + elen + clen
    sys.exit(f"{member} not in wheel")

main(*sys.argv[1:])
