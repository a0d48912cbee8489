bytearray(64 * 2**30)
