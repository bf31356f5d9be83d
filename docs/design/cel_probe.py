#!/usr/bin/env python3
"""Probe two CEL libraries from PyPI against Kubernetes DRA selector expressions.

Reproduces the figures in docs/design/dra-cel.md. Run it in a scratch venv, not in the
project's environment:

    python3 -m venv /tmp/celvenv
    /tmp/celvenv/bin/pip install cel-python cel-expr-python protobuf
    /tmp/celvenv/bin/python docs/design/cel_probe.py            # full run (~1 min)
    /tmp/celvenv/bin/python docs/design/cel_probe.py --quick    # fewer timeit loops

What it checks, for `cel-python` (module `celpy`, pure Python) and `cel-expr-python`
(module `cel_expr_python`, a binding of the C++ CEL runtime):

* the five DRA expressions of issue 43 plus `has(...)` and a missing attribute;
* whether `quantity(...)`, `semver(...)` and their member functions (`compareTo`,
  `isGreaterThan`) can be registered, with exact (Decimal / integer) semantics;
* compile time per expression and evaluation time per device (timeit);
* whether the library has a cost limit or evaluation budget (a nested comprehension of
  10**5 and 10**6 iterations, the kind that Kubernetes' runtime cost limit of 1,000,000
  aborts);
* how a runtime error (missing attribute) surfaces.

The Kubernetes semantics being imitated are in
staging/src/k8s.io/dynamic-resource-allocation/cel/compile.go (release-1.36):
`device.attributes[domain]` / `device.capacity[domain]` return an empty map for an
unknown domain (`newStringInterfaceMapWithDefault`), a missing attribute *inside* a known
domain map is a CEL runtime error ("no such key"), which makes the allocator return a
fatal error (Filter -> Error status), not "device does not match".
"""

from __future__ import annotations

import argparse
import decimal
import re
import sys
import time
import timeit

decimal.getcontext().prec = 60

# --------------------------------------------------------------------------------------
# Kubernetes resource.Quantity and semver, reduced to what DRA selectors use.
# --------------------------------------------------------------------------------------

_BIN = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DEC = {"n": decimal.Decimal("1e-9"), "u": decimal.Decimal("1e-6"), "m": decimal.Decimal("1e-3"),
        "": decimal.Decimal(1), "k": decimal.Decimal("1e3"), "M": decimal.Decimal("1e6"),
        "G": decimal.Decimal("1e9"), "T": decimal.Decimal("1e12"), "P": decimal.Decimal("1e15"),
        "E": decimal.Decimal("1e18")}
_QRE = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)|[eE]([+-]?\d+))?$")


def parse_quantity(s: str) -> decimal.Decimal:
    """Exact value of a Kubernetes quantity string (values below 1n round up, as upstream)."""
    m = _QRE.match(s.strip())
    if not m:
        raise ValueError(f"quantities must match the regular expression: {s!r}")
    num = decimal.Decimal(m.group(1))
    if m.group(2) in _BIN:
        num *= _BIN[m.group(2)]
    elif m.group(2) is not None:
        num *= _DEC[m.group(2)]
    elif m.group(3) is not None:
        num *= decimal.Decimal(10) ** int(m.group(3))
    nano = decimal.Decimal("1e-9")
    return (num / nano).to_integral_value(rounding=decimal.ROUND_CEILING) * nano


_SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
                     r"(?:-((?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*)(?:\.(?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*))*))?"
                     r"(?:\+([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?$")


def parse_semver(s: str):
    m = _SEMVER.match(s)
    if not m:
        raise ValueError(f"invalid semver: {s!r}")
    pre = tuple(int(p) if p.isdigit() else p for p in m.group(4).split(".")) if m.group(4) else ()
    return (int(m.group(1)), int(m.group(2)), int(m.group(3)), pre)


def semver_cmp(a, b) -> int:
    if a[:3] != b[:3]:
        return -1 if a[:3] < b[:3] else 1
    pa, pb = a[3], b[3]
    if pa == pb:
        return 0
    if not pa:
        return 1          # release > pre-release
    if not pb:
        return -1
    for x, y in zip(pa, pb):
        if x == y:
            continue
        if isinstance(x, int) and isinstance(y, int):
            return -1 if x < y else 1
        if isinstance(x, int):
            return -1     # numeric identifiers sort before alphanumeric
        if isinstance(y, int):
            return 1
        return -1 if x < y else 1
    return -1 if len(pa) < len(pb) else 1


def _sign(x) -> int:
    return (x > 0) - (x < 0)


# --------------------------------------------------------------------------------------
# A device as a DRA driver publishes it (v1 ResourceSlice device), and the expressions.
# --------------------------------------------------------------------------------------

DRIVER = "gpu.nvidia.com"
DEVICE = {
    "driver": DRIVER,
    "attributes": {
        DRIVER: {"productName": "H100", "uuid": "GPU-0b7e", "index": 3, "mig": False,
                 "driverVersion": ("semver", "550.54.15")},
    },
    "capacity": {DRIVER: {"memory": ("quantity", "80Gi")}},
    "allowMultipleAllocations": False,
}

EXPRESSIONS = {
    "driver": 'device.driver == "gpu.nvidia.com"',
    "productName": 'device.attributes["gpu.nvidia.com"].productName == "H100"',
    "memory>=40Gi": 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0',
    "driverVersion>550": 'device.attributes["gpu.nvidia.com"].driverVersion.isGreaterThan(semver("550.0.0"))',
    "has(present)": 'has(device.attributes["gpu.nvidia.com"].productName)',
    "has(missing)": 'has(device.attributes["gpu.nvidia.com"].nvlinkDomain)',
    "has(unknown domain)": 'has(device.attributes["other.example.com"].x)',
    "missing attribute": 'device.attributes["gpu.nvidia.com"].nvlinkDomain == "a"',
    "unknown domain attr": 'device.attributes["other.example.com"].x == "a"',
}
EXPECTED = {
    "driver": True, "productName": True, "memory>=40Gi": True, "driverVersion>550": True,
    "has(present)": True, "has(missing)": False, "has(unknown domain)": False,
    "missing attribute": "error", "unknown domain attr": "error",
}


def nested_all(depth: int, width: int = 10) -> str:
    lst = "[" + ",".join(str(i) for i in range(width)) + "]"
    names = [f"v{i}" for i in range(depth)]
    body = " + ".join(names) + " >= 0"
    for n in reversed(names):
        body = f"{lst}.all({n}, {body})"
    return body


# --------------------------------------------------------------------------------------
# cel-python (celpy)
# --------------------------------------------------------------------------------------

def make_celpy():
    import celpy
    from celpy import celtypes as ct

    class Quantity(ct.StringType):
        """Opaque quantity; the string keeps it printable."""
        def __new__(cls, s):
            obj = super().__new__(cls, s)
            obj.value = parse_quantity(s)
            return obj

    class Semver(ct.StringType):
        def __new__(cls, s):
            obj = super().__new__(cls, s)
            obj.value = parse_semver(s)
            return obj

    def quantity(s):
        return Quantity(str(s))

    def semver(s):
        return Semver(str(s))

    def compareTo(a, b):
        if isinstance(a, Quantity) and isinstance(b, Quantity):
            return ct.IntType(_sign(a.value - b.value))
        if isinstance(a, Semver) and isinstance(b, Semver):
            return ct.IntType(semver_cmp(a.value, b.value))
        raise TypeError("no such overload: compareTo")

    def isGreaterThan(a, b):
        return ct.BoolType(compareTo(a, b) > 0)

    def isLessThan(a, b):
        return ct.BoolType(compareTo(a, b) < 0)

    functions = {"quantity": quantity, "semver": semver, "compareTo": compareTo,
                 "isGreaterThan": isGreaterThan, "isLessThan": isLessThan}

    def to_cel(v):
        if isinstance(v, tuple) and v[0] == "quantity":
            return Quantity(v[1])
        if isinstance(v, tuple) and v[0] == "semver":
            return Semver(v[1])
        if isinstance(v, bool):
            return ct.BoolType(v)
        if isinstance(v, int):
            return ct.IntType(v)
        if isinstance(v, str):
            return ct.StringType(v)
        if isinstance(v, dict):
            return ct.MapType({ct.StringType(k): to_cel(x) for k, x in v.items()})
        raise TypeError(type(v))

    class DefaultingMap(ct.MapType):
        """device.attributes / device.capacity: unknown domain -> empty map (as upstream)."""
        def __getitem__(self, key):
            try:
                return super().__getitem__(key)
            except KeyError:
                return ct.MapType({})

    def activation(device):
        d = to_cel(device)
        d[ct.StringType("attributes")] = DefaultingMap(d[ct.StringType("attributes")])
        d[ct.StringType("capacity")] = DefaultingMap(d[ct.StringType("capacity")])
        return {"device": d}

    env = celpy.Environment()

    def compile_(expr):
        return env.program(env.compile(expr), functions=functions)

    def evaluate(prog, act):
        return prog.evaluate(act)

    return {"name": "cel-python (celpy)", "compile": compile_, "eval": evaluate,
            "activation": activation, "error_types": (celpy.CELEvalError,)}


# --------------------------------------------------------------------------------------
# cel-expr-python (C++ runtime)
# --------------------------------------------------------------------------------------

def make_celexpr():
    from cel_expr_python import cel
    from cel_expr_python.ext import ext_strings, ext_bindings, ext_optional
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    # Opaque Kubernetes types are modelled as proto messages in a private package: the
    # binding rejects arbitrary Python objects as values ("Unimplemented type").
    pool = descriptor_pool.DescriptorPool()
    fdp = descriptor_pb2.FileDescriptorProto(name="dra_probe.proto", package="kubernetes", syntax="proto3")
    for name in ("Quantity", "Semver"):
        m = fdp.message_type.add(name=name)
        m.field.add(name="text", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
                    label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    pool.Add(fdp)
    Q = message_factory.GetMessageClass(pool.FindMessageTypeByName("kubernetes.Quantity"))
    S = message_factory.GetMessageClass(pool.FindMessageTypeByName("kubernetes.Semver"))
    T = cel.Type
    qt, st = T("kubernetes.Quantity"), T("kubernetes.Semver")

    # Parsed values are cached per text: the binding hands us a fresh message per call.
    qcache: dict[str, decimal.Decimal] = {}
    scache: dict[str, tuple] = {}

    def qv(m):
        v = qcache.get(m.text)
        if v is None:
            v = qcache[m.text] = parse_quantity(m.text)
        return v

    def sv(m):
        v = scache.get(m.text)
        if v is None:
            v = scache[m.text] = parse_semver(m.text)
        return v

    def cmp(a, b):
        ta, tb = type(a).__name__, type(b).__name__
        if ta != tb:
            raise TypeError(f"no such overload: {ta}.compareTo({tb})")
        if ta == "Quantity":
            return _sign(qv(a) - qv(b))
        if ta == "Semver":
            return semver_cmp(sv(a), sv(b))
        raise TypeError(f"no such overload: {ta}.compareTo")

    functions = [
        cel.FunctionDecl("quantity", [cel.Overload("quantity_string", qt, [T.STRING],
                                                   impl=lambda s: (parse_quantity(s), Q(text=s))[1])]),
        cel.FunctionDecl("semver", [cel.Overload("semver_string", st, [T.STRING],
                                                 impl=lambda s: (parse_semver(s), S(text=s))[1])]),
        # The C++ runtime registers implementations by argument *kind*, and both opaque
        # types are of kind "message": two typed overloads with an impl each collide
        # (ALREADY_EXISTS), and a dyn overload does not match a message at run time. What
        # works: declare the typed overloads (exact type checking) and give an
        # implementation for one overload id per function, which dispatches on the type.
        cel.FunctionDecl("compareTo", [cel.Overload("quantity_compareTo", T.INT, [qt, qt], is_member=True),
                                       cel.Overload("semver_compareTo", T.INT, [st, st], is_member=True)]),
        cel.FunctionDecl("isGreaterThan", [cel.Overload("quantity_isGreaterThan", T.BOOL, [qt, qt], is_member=True),
                                           cel.Overload("semver_isGreaterThan", T.BOOL, [st, st], is_member=True)]),
        cel.FunctionDecl("isLessThan", [cel.Overload("quantity_isLessThan", T.BOOL, [qt, qt], is_member=True),
                                        cel.Overload("semver_isLessThan", T.BOOL, [st, st], is_member=True)]),
    ]
    impls = {"quantity_compareTo": lambda a, b: cmp(a, b),
             "quantity_isGreaterThan": lambda a, b: cmp(a, b) > 0,
             "quantity_isLessThan": lambda a, b: cmp(a, b) < 0}
    env = cel.NewEnv(pool, variables={"device": T.Map(T.STRING, T.DYN)}, functions=functions,
                     function_impls=impls,
                     extensions=[ext_strings.ExtStrings(), ext_bindings.ExtBindings(),
                                 ext_optional.ExtOptional()])

    def to_py(v):
        if isinstance(v, tuple) and v[0] == "quantity":
            return Q(text=v[1])
        if isinstance(v, tuple) and v[0] == "semver":
            return S(text=v[1])
        if isinstance(v, dict):
            return {k: to_py(x) for k, x in v.items()}
        return v

    # The binding converts the activation eagerly (no lazy map hook), so upstream's
    # "unknown domain -> empty map" is emulated by adding an empty map for every string
    # literal of the expression that is not a known domain.
    def activation(device, expr=""):
        d = to_py(device)
        for lit in re.findall(r'"([^"\\]*)"|\'([^\'\\]*)\'', expr):
            key = lit[0] or lit[1]
            d["attributes"].setdefault(key, {})
            d["capacity"].setdefault(key, {})
        return {"device": d}

    def compile_(expr):
        return env.compile(expr)

    def evaluate(prog, act):
        r = prog.eval(data=act)
        # Runtime errors come back as a value of type ERROR (only the iteration budget
        # raises RuntimeError); turn them into exceptions like celpy's CELEvalError.
        if r.type() == T.ERROR:
            raise ValueError(r.value())
        return r.value()

    return {"name": "cel-expr-python (C++)", "compile": compile_, "eval": evaluate,
            "activation": activation, "error_types": (RuntimeError, ValueError)}


# --------------------------------------------------------------------------------------


def run(lib, quick: bool):
    print(f"\n=== {lib['name']} ===")
    n_compile = 20 if quick else 200
    n_eval = 200 if quick else 5000
    print(f"{'expression':22} {'result':>10} {'compile µs':>11} {'eval µs/device':>15}")
    for key, expr in EXPRESSIONS.items():
        try:
            prog = lib["compile"](expr)
        except Exception as ex:  # noqa: BLE001 - the probe reports every failure
            print(f"{key:22} COMPILE ERROR {type(ex).__name__}: {ex}")
            continue
        try:
            act = lib["activation"](DEVICE, expr)
        except TypeError:
            act = lib["activation"](DEVICE)
        try:
            res = lib["eval"](prog, act)
            shown = str(bool(res)) if isinstance(res, (bool, int)) else repr(res)
        except Exception as ex:  # noqa: BLE001
            res = "error"
            shown = f"error ({type(ex).__name__}: {str(ex)[:60]})"
        if EXPECTED[key] == "error":
            ok = res == "error"
        else:
            ok = res != "error" and bool(res) == EXPECTED[key]
        tc = timeit.timeit(lambda: lib["compile"](expr), number=n_compile) / n_compile * 1e6
        if res == "error":
            te = float("nan")
        else:
            te = timeit.timeit(lambda: lib["eval"](prog, act), number=n_eval) / n_eval * 1e6
        print(f"{key:22} {('OK ' if ok else 'BAD ') + shown[:60]:>10} {tc:11.1f} {te:15.1f}")

    # Activation building is part of the per-device cost; measure it separately.
    n_act = 200 if quick else 2000
    ta = timeit.timeit(lambda: lib["activation"](DEVICE, EXPRESSIONS["productName"])
                       if lib["name"].startswith("cel-expr") else lib["activation"](DEVICE),
                       number=n_act) / n_act * 1e6
    print(f"activation build per device: {ta:.1f} µs")

    # Cost limit / budget: Kubernetes aborts at runtime when the actual cost exceeds
    # 1,000,000 (resourceapi.CELSelectorExpressionMaxCost).
    # celpy needs ~1 ms per iteration here: 10^5 iterations take minutes, so it gets
    # 10^3 and 10^4. The C++ runtime stops any evaluation at 10,000 comprehension
    # iterations in total ("Iteration budget exceeded", not configurable from Python).
    depths = (3, 4, 6) if lib["name"].startswith("cel-expr") else (3, 4)
    for depth in depths:
        expr = nested_all(depth)
        prog = lib["compile"](expr)
        act = lib["activation"](DEVICE) if not lib["name"].startswith("cel-expr") else lib["activation"](DEVICE, "")
        t0 = time.perf_counter()
        try:
            r = lib["eval"](prog, act)
            outcome = f"completed ({r})"
        except Exception as ex:  # noqa: BLE001
            outcome = f"error {type(ex).__name__}: {str(ex)[:80]}"
        dt = time.perf_counter() - t0
        print(f"nested all() 10^{depth} iterations: {dt*1e3:9.1f} ms, {outcome}")
    flat = "[" + ",".join(["1"] * 5000) + "].all(x, x >= 0)"
    prog = lib["compile"](flat)
    act = lib["activation"](DEVICE) if not lib["name"].startswith("cel-expr") else lib["activation"](DEVICE, "")
    t0 = time.perf_counter()
    lib["eval"](prog, act)
    print(f"flat all() over a 5,000-element literal list: {(time.perf_counter()-t0)*1e3:.1f} ms")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    print(sys.version.split()[0])
    for maker in (make_celpy, make_celexpr):
        try:
            lib = maker()
        except ImportError as ex:
            print(f"\n{maker.__name__}: not installed ({ex})")
            continue
        run(lib, args.quick)


if __name__ == "__main__":
    main()
