#!/usr/bin/env python3
"""Probe (session 19): rewrite a SPIR-V module that Debian 12's glslang compiled with GL_NV_cooperative_matrix
into SPV_KHR_cooperative_matrix (as ../cm2/nv2khr.py does) and, in addition, turn every cooperative-matrix load
from a storage buffer into SPV_NV_cooperative_matrix2's tensor-addressed load (OpCooperativeMatrixLoadTensorNV),
which Debian's glslang cannot compile. Each load becomes: a 2-D tensor layout with the matrix's dimensions,
the load's stride and stride 1, sliced at (0, 0); a column-major load reads the transposed layout through a
tensor view with permutation (1, 0). Loads from shared memory stay plain KHR loads."""
import struct, sys

sys.path.insert(0, __import__("os").path.join(__import__("os").path.dirname(__file__), "..", "cm2"))
import nv2khr  # noqa: E402

OP_CAP, OP_EXT, OP_CONST, OP_TYPE_INT, OP_TYPE_BOOL, OP_FALSE = 17, 10, 43, 21, 20, 42
OP_TYPE_PTR, OP_VARIABLE, OP_ACCESS_CHAIN, OP_UNDEF, OP_LABEL, OP_FUNCTION = 32, 59, 65, 1, 248, 54
KHR_TYPE, KHR_LOAD = 4456, 4457
LOAD_TENSOR, TYPE_LAYOUT, TYPE_VIEW, CREATE_LAYOUT, SET_DIM, SET_STRIDE, SLICE, CREATE_VIEW = (
    5367, 5370, 5371, 5372, 5373, 5374, 5375, 5377)
CAP_TENSOR_ADDRESSING, CAP_CM_TENSOR_ADDRESSING = 5439, 5433
SC_STORAGE_BUFFER = 12


def decode(words):
    body, insts, i = words[5:], [], 0
    while i < len(body):
        wc, op = body[i] >> 16, body[i] & 0xFFFF
        insts.append([op] + body[i + 1:i + wc])
        i += wc
    return words[:5], insts


def encode(header, insts):
    res = list(header)
    for ins in insts:
        res.append((len(ins) << 16) | ins[0])
        res.extend(ins[1:])
    return res


def convert(words):
    header, insts = decode(nv2khr.convert(words))
    bound = header[3]

    def new_id():
        nonlocal bound
        bound += 1
        return bound - 1

    uint_t = next(ins[1] for ins in insts if ins[0] == OP_TYPE_INT and ins[2] == 32 and ins[3] == 0)
    consts = {ins[3]: ins[2] for ins in insts if ins[0] == OP_CONST and ins[1] == uint_t and len(ins) == 4}
    val_of = {ins[2]: ins[3] for ins in insts if ins[0] == OP_CONST and len(ins) == 4}
    mat_types = {ins[1]: ins for ins in insts if ins[0] == KHR_TYPE}  # id -> [op, id, comp, scope, rows, cols, use]
    ptr_sc = {ins[1]: ins[2] for ins in insts if ins[0] == OP_TYPE_PTR}
    value_ptr_type = {ins[2]: ins[1] for ins in insts if ins[0] in (OP_VARIABLE, OP_ACCESS_CHAIN)}
    loads = [ins for ins in insts if ins[0] == KHR_LOAD and ptr_sc.get(value_ptr_type.get(ins[3])) == SC_STORAGE_BUFFER]
    if not loads:
        raise SystemExit("nv2tensor: no cooperative-matrix load from a storage buffer")
    # Global declarations, placed after the last matrix type: layout and view types, constants, undefs.
    g = []
    def const(v):
        if v not in consts:
            consts[v] = new_id()
            g.append([OP_CONST, uint_t, consts[v], v])
        return consts[v]
    c0, c1, c2 = const(0), const(1), const(2)
    bool_t = next((ins[1] for ins in insts if ins[0] == OP_TYPE_BOOL), None)
    if bool_t is None:
        bool_t = new_id(); g.append([OP_TYPE_BOOL, bool_t])
    false_c = new_id(); g.append([OP_FALSE, bool_t, false_c])
    layout_t = new_id(); g.append([TYPE_LAYOUT, layout_t, c2, c0])  # 2 dimensions, clamp mode Undefined
    view_t = new_id(); g.append([TYPE_VIEW, view_t, c2, false_c, c1, c0])  # 2 dimensions, permutation (1, 0)
    undef = {}
    for t in {ins[1] for ins in loads}:
        undef[t] = new_id(); g.append([OP_UNDEF, t, undef[t]])
    last_type = max(i for i, ins in enumerate(insts) if ins[0] == KHR_TYPE)
    out = []
    for i, ins in enumerate(insts):
        if ins[0] == OP_CAP and ins[1] == 6022:  # CooperativeMatrixKHR
            out += [ins, [OP_CAP, CAP_TENSOR_ADDRESSING], [OP_CAP, CAP_CM_TENSOR_ADDRESSING]]
            continue
        if ins[0] == OP_EXT and ins[1:] == nv2khr.words_of_string("SPV_KHR_cooperative_matrix"):
            out += [ins, [OP_EXT] + nv2khr.words_of_string("SPV_NV_cooperative_matrix2"),
                    [OP_EXT] + nv2khr.words_of_string("SPV_NV_tensor_addressing")]
            continue
        if ins in loads:  # KHR load: rt res ptr layout stride [mem...]
            rt, res, ptr, lay, stride, mem = ins[1], ins[2], ins[3], ins[4], ins[5], ins[6:]
            rows, cols = mat_types[rt][4], mat_types[rt][5]
            col_major = val_of[lay] == 1
            d0, d1 = (cols, rows) if col_major else (rows, cols)
            l0, l1, l2, l3 = new_id(), new_id(), new_id(), new_id()
            out += [[CREATE_LAYOUT, layout_t, l0], [SET_DIM, layout_t, l1, l0, d0, d1],
                    [SET_STRIDE, layout_t, l2, l1, stride, c1], [SLICE, layout_t, l3, l2, c0, d0, c0, d1]]
            ta = [0]
            if col_major:
                v = new_id(); out.append([CREATE_VIEW, view_t, v]); ta = [1, v]
            out.append([LOAD_TENSOR, rt, res, ptr, undef[rt], l3] + (mem if mem else [0]) + ta)
            continue
        out.append(ins)
        if i == last_type:
            out += g
    header[3] = bound
    return encode(header, out)


if __name__ == "__main__":
    data = open(sys.argv[1], "rb").read()
    w = list(struct.unpack("<%dI" % (len(data) // 4), data))
    r = convert(w)
    open(sys.argv[2], "wb").write(struct.pack("<%dI" % len(r), *r))
