"""A software prefetch the fused kernel issues for rows it will read a few envs later.

Numba exposes no prefetch, so this is a small intrinsic around LLVM's ``llvm.prefetch``: a hint
that never faults (an address past the array's end is harmless) and does nothing where the row
is already cached.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

_READ, _KEEP_IN_ALL_CACHES, _DATA_CACHE = 0, 3, 1


@intrinsic
def prefetch_row(typingctx, array, row, byte_offset):
    """Prefetch, for reading, the cache line at ``byte_offset`` in row ``row`` of ``array``.

    ``byte_offset`` must be a compile-time constant (the generated kernel writes it out).
    """
    if not isinstance(array, types.Array) or not isinstance(byte_offset, types.IntegerLiteral):
        return None
    offset = byte_offset.literal_value

    def codegen(context, builder, signature, args):
        array_type, row_type = signature.args[0], signature.args[1]
        data = context.make_array(array_type)(context, builder, args[0])
        row_stride = cgutils.unpack_tuple(builder, data.strides)[0]
        index = context.cast(builder, args[1], row_type, types.intp)
        start = builder.add(
            builder.mul(index, row_stride), context.get_constant(types.intp, offset)
        )
        byte = ir.IntType(8).as_pointer()
        address = builder.gep(builder.bitcast(data.data, byte), [start])
        i32 = ir.IntType(32)
        hint = ir.FunctionType(ir.VoidType(), [byte, i32, i32, i32])
        llvm_prefetch = cgutils.get_or_insert_function(builder.module, hint, "llvm.prefetch.p0")
        builder.call(
            llvm_prefetch, [address, i32(_READ), i32(_KEEP_IN_ALL_CACHES), i32(_DATA_CACHE)]
        )
        return context.get_dummy_value()

    return types.void(array, row, byte_offset), codegen
