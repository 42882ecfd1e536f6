"""_hnswfiles.py -- the files keel.hnswlib reads and writes besides keel's
own: the .hnswlib file beside a keel index (the hnswlib state keel's file
has no place for), hnswlib's saved HNSW index (read, for convert) and
hnswlib's brute-force index (BFIndex's save_index and load_index). Their
layouts are in doc/python.md, "keel.hnswlib's files".
"""

import json
import os
import stat
import struct
import warnings

import numpy as np

SIDECAR = ".hnswlib"
SIDECAR_VERSION = 1


def sidecar_path(path):
    return os.fsdecode(path) + SIDECAR


def _fingerprint(ix):
    st = ix.stats()
    return [int(st["dimensions"]), int(st["count"]), int(st["next_id"])]


def read_sidecar(path, ix):
    """The hnswlib state saved beside the keel file at path, or None if
    there is none or it belongs to another state of the file."""
    side = sidecar_path(path)
    if not os.path.exists(side):
        return None
    try:
        with np.load(side, allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            labels = z["deleted_labels"].astype(np.uint64)
            vectors = z["deleted_vectors"].astype(np.float32)
        if not isinstance(meta, dict) or labels.ndim != 1 or \
                vectors.ndim != 2 or len(labels) != len(vectors):
            raise ValueError("not the layout save_index writes")
    except Exception as e:     # cut short, overwritten: the keel file stands
        warnings.warn("%s cannot be read (%s: %s): loading %s without it, "
                      "nothing marked deleted\nhelp: save_index() again to "
                      "write a new one" % (side, type(e).__name__, e,
                                           os.fsdecode(path)),
                      RuntimeWarning, stacklevel=3)
        return None
    if meta.get("version") != SIDECAR_VERSION or \
            meta.get("fingerprint") != _fingerprint(ix):
        warnings.warn("%s does not match the keel file %s (it was changed "
                      "since save_index): loading without it, nothing "
                      "marked deleted\nhelp: save_index() again to write a "
                      "matching one" % (side, os.fsdecode(path)),
                      RuntimeWarning, stacklevel=3)
        return None
    meta["deleted"] = {int(l): v for l, v in zip(labels, vectors)}
    return meta


def write_sidecar(path, ix, meta, deleted):
    side = sidecar_path(path)
    labels = np.fromiter(deleted.keys(), dtype=np.uint64, count=len(deleted))
    vectors = np.array(list(deleted.values()), dtype=np.float32).reshape(
        len(deleted), -1) if deleted else np.zeros((0, 0), np.float32)
    meta = dict(meta, version=SIDECAR_VERSION, fingerprint=_fingerprint(ix))
    tmp = side + ".tmp"
    with open(tmp, "wb") as f:
        np.savez(f, meta=np.array(json.dumps(meta)), deleted_labels=labels,
                 deleted_vectors=vectors)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, side)


def write_bruteforce(path, capacity, labels, vectors):
    """hnswlib's BruteforceSearch::saveIndex: three uint64 (capacity, bytes
    per element, count), then capacity elements of vector and label."""
    count, dim = vectors.shape
    size = dim * 4 + 8
    buf = np.zeros((capacity, size), np.uint8)
    buf[:count, :dim * 4] = vectors.view(np.uint8)
    buf[:count, dim * 4:] = labels[:, None].view(np.uint8)
    with open(path, "wb") as f:
        f.write(struct.pack("<QQQ", capacity, size, count))
        f.write(buf.tobytes())


def read_bruteforce(path, dim):
    """(capacity, labels, vectors) of a brute-force index file."""
    name = os.fsdecode(path)
    with open(path, "rb") as f:
        head = f.read(24)
        if len(head) != 24:
            raise RuntimeError("%s is not an hnswlib brute-force index\nhelp: "
                               "give a file BFIndex.save_index wrote" % name)
        cap, size, count = struct.unpack("<QQQ", head)
        if size != dim * 4 + 8 or count > cap:
            raise RuntimeError(
                "%s holds elements of %d bytes, not %d (vectors of %d "
                "dimensions)\nhelp: load it into a BFIndex of its own "
                "dimensions" % (name, size, dim * 4 + 8, dim))
        # The header's count is checked against the file's size before any
        # read: a crafted count asks for no memory the file does not hold.
        whole = os.fstat(f.fileno()).st_size - 24 >= count * size
        raw = np.frombuffer(f.read(count * size), np.uint8) if whole \
            else np.zeros(0, np.uint8)
    if raw.shape[0] != count * size:
        raise RuntimeError("%s is cut short: %d elements need %d bytes\n"
                           "help: give a whole file BFIndex.save_index wrote"
                           % (name, count, 24 + count * size))
    raw = raw.reshape(count, size)
    vectors = raw[:, :dim * 4].copy().view(np.float32)
    labels = raw[:, dim * 4:].copy().view(np.uint64).reshape(-1)
    return cap, labels, vectors


# -- hnswlib's saved HNSW format (hnswalg.h, saveIndex) ----------------------

_HEADER = struct.Struct("<QQQQQQiIQQQdQ")
_HEADER_FIELDS = ("offset_level0", "max_elements", "cur_element_count",
                  "size_data_per_element", "label_offset", "offset_data",
                  "max_level", "enterpoint_node", "max_m", "max_m0", "m",
                  "mult", "ef_construction")


def read_hnswlib(path):
    """Reads an hnswlib index file: (header dict, labels uint64 array,
    vectors float32 array, deleted bool array), in hnswlib's element order.
    Raises ValueError naming what does not fit the format."""
    name = os.fsdecode(path)
    with open(path, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            # A device or pipe (/dev/zero) would be read until memory ran
            # out: hnswlib's save_index writes a regular file.
            raise ValueError("%s is not a regular file\nhelp: give the path "
                             "of an hnswlib index file (not a device or "
                             "pipe)" % name)
        raw = f.read()
    help_ = ("\nhelp: give a file written by hnswlib's Index.save_index "
             "(hnswlib 0.4 to 0.8)")
    if len(raw) < _HEADER.size:
        raise ValueError("%s is %d bytes, shorter than hnswlib's %d-byte "
                         "header%s" % (name, len(raw), _HEADER.size, help_))
    h = dict(zip(_HEADER_FIELDS, _HEADER.unpack_from(raw)))
    n, per = h["cur_element_count"], h["size_data_per_element"]
    link0 = 4 + 4 * h["max_m0"]
    dim4 = h["label_offset"] - h["offset_data"]
    checks = (("offset_level0", h["offset_level0"] == 0),
              ("offset_data", h["offset_data"] == link0),
              ("label_offset", dim4 > 0 and dim4 % 4 == 0),
              ("size_data_per_element", per == h["label_offset"] + 8),
              ("cur_element_count", n <= h["max_elements"] and
               _HEADER.size + n * per <= len(raw)))
    for field, ok in checks:
        if not ok:
            raise ValueError("%s is not an hnswlib index: its %s (%d) does "
                             "not fit the format%s"
                             % (name, field, h[field], help_))
    # The upper levels: one uint32 size and its bytes per element; the
    # file ends where they do.
    at = _HEADER.size + n * per
    unit = h["max_m"] * 4 + 4
    for i in range(n):
        if at + 4 > len(raw):
            raise ValueError("%s is cut short in element %d's link lists%s"
                             % (name, i, help_))
        size = struct.unpack_from("<I", raw, at)[0]
        if unit == 0 or size % unit:
            raise ValueError("%s: element %d's link lists are %d bytes, not "
                             "a multiple of %d%s" % (name, i, size, unit,
                                                     help_))
        at += 4 + size
    if at != len(raw):
        raise ValueError("%s is %d bytes, but hnswlib's format ends at byte "
                         "%d%s" % (name, len(raw), at, help_))
    h["dim"] = dim4 // 4
    elems = np.frombuffer(raw, np.uint8, n * per, _HEADER.size).reshape(n, per)
    vectors = elems[:, h["offset_data"]:h["label_offset"]].copy().view(
        np.float32)
    labels = elems[:, h["label_offset"]:per].copy().view(np.uint64) \
        .reshape(-1)
    deleted = (elems[:, 2] & 1).astype(bool)
    return h, labels, vectors, deleted
