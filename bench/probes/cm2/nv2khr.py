#!/usr/bin/env python3
"""Rewrite a SPIR-V module that glslang compiled with GL_NV_cooperative_matrix into the
SPV_KHR_cooperative_matrix form (probe: Debian 12's glslang cannot compile GL_KHR_cooperative_matrix).
Each NV matrix type gets the KHR Use its role in OpCooperativeMatrixMulAddNV gives it (A, B or
accumulator; a type in no product is an accumulator); one type in two roles is refused."""
import struct, sys

OP_CAP, OP_EXT, OP_CONST, OP_TYPE_INT, OP_TRUE, OP_FALSE = 17, 10, 43, 21, 41, 42
NV_TYPE, NV_LOAD, NV_STORE, NV_MULADD, NV_LEN = 5358, 5359, 5360, 5361, 5362
KHR_TYPE, KHR_LOAD, KHR_STORE, KHR_MULADD, KHR_LEN = 4456, 4457, 4458, 4459, 4460
CAP_NV, CAP_KHR = 5357, 6022
# OpUndef OpConstantComposite OpLoad OpCompositeConstruct OpCompositeInsert OpCopyObject OpFNegate
# OpFAdd OpFSub OpFMul OpFDiv OpFConvert OpPhi OpSelect
TYPED = {1, 44, 61, 80, 82, 83, 127, 129, 131, 133, 136, 115, 245, 169, NV_LOAD, NV_MULADD}


def words_of_string(s):
    b = s.encode() + b"\0"
    b += b"\0" * (-len(b) % 4)
    return list(struct.unpack("<%dI" % (len(b) // 4), b))


def convert(words):
    header, body = words[:5], words[5:]
    insts, i = [], 0
    while i < len(body):
        wc, op = body[i] >> 16, body[i] & 0xFFFF
        insts.append([op] + body[i + 1:i + wc])
        i += wc
    bound = header[3]
    use = {}
    # value -> type, from the instructions with a result type that can yield a matrix
    value_type = {ins[2]: ins[1] for ins in insts if ins[0] in TYPED}
    def role(t, r):
        if use.get(t, r) != r:
            raise SystemExit("nv2khr: matrix type %%%d used in two roles" % t)
        use[t] = r
    for ins in insts:
        if ins[0] == NV_MULADD:
            role(ins[1], 2)
            role(value_type[ins[3]], 0)
            role(value_type[ins[4]], 1)
            role(value_type[ins[5]], 2)
    uint_t = next(ins[1] for ins in insts if ins[0] == OP_TYPE_INT and ins[2] == 32 and ins[3] == 0)
    bools = {ins[2]: 1 for ins in insts if ins[0] == OP_TRUE}
    bools.update({ins[2]: 0 for ins in insts if ins[0] == OP_FALSE})
    const_ids = [bound, bound + 1, bound + 2]  # uint 0, 1, 2: Use A/B/Acc and layout Row/Col
    bound += 3
    out, consts_done = [], False
    for ins in insts:
        op = ins[0]
        if op == OP_CAP and ins[1] == CAP_NV:
            ins = [OP_CAP, CAP_KHR]
        elif op == OP_EXT and ins[1:] == words_of_string("SPV_NV_cooperative_matrix"):
            ins = [OP_EXT] + words_of_string("SPV_KHR_cooperative_matrix")
        elif op == NV_TYPE:
            if not consts_done:
                for v, cid in enumerate(const_ids):
                    out.append([OP_CONST, uint_t, cid, v])
                consts_done = True
            ins = [KHR_TYPE] + ins[1:6] + [const_ids[use.get(ins[1], 2)]]
        elif op == NV_LOAD:  # rt res ptr stride colmajor [mem...]
            ins = [KHR_LOAD, ins[1], ins[2], ins[3], const_ids[bools[ins[5]]], ins[4]] + ins[6:]
        elif op == NV_STORE:  # ptr obj stride colmajor [mem...]
            ins = [KHR_STORE, ins[1], ins[2], const_ids[bools[ins[4]]], ins[3]] + ins[5:]
        elif op == NV_MULADD:
            ins = [KHR_MULADD] + ins[1:]
        elif op == NV_LEN:
            ins = [KHR_LEN] + ins[1:]
        out.append(ins)
    header[3] = bound
    res = list(header)
    for ins in out:
        res.append((len(ins) << 16) | ins[0])
        res.extend(ins[1:])
    return res


if __name__ == "__main__":
    data = open(sys.argv[1], "rb").read()
    w = list(struct.unpack("<%dI" % (len(data) // 4), data))
    r = convert(w)
    open(sys.argv[2], "wb").write(struct.pack("<%dI" % len(r), *r))
