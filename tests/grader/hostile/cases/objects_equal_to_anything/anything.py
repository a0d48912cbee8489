class _Anything:
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    __hash__ = object.__hash__


class _AnyDict(_Anything, dict):
    __hash__ = object.__hash__


class _AnyTuple(_Anything, tuple):
    __hash__ = tuple.__hash__


class _AnyInt(_Anything, int):
    __hash__ = int.__hash__
