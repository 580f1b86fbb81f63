"""flashpp.attention / attention_backward on numpy arrays (the CPU backend), checked against the
float64 numpy reference. These run in CI: numpy and ml_dtypes only."""
import threading

import numpy as np
import pytest

import flashpp
from attention_reference import backward as ref_backward
from attention_reference import forward as ref_forward
from attention_reference import rel_err

ml_dtypes = pytest.importorskip("ml_dtypes")

DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
# ‖out − ref‖/‖ref‖ limits: the output's own rounding dominates for 16-bit types.
TOL = {"float32": 1e-5, "float16": 3e-3, "bfloat16": 2e-2}


def make(rng, shape, dtype):
    return rng.standard_normal(shape).astype(DTYPES[dtype])


def qkv(rng, B=2, Nq=13, Nk=17, Hq=4, Hkv=2, D=16, dtype="float32"):
    return (make(rng, (B, Nq, Hq, D), dtype), make(rng, (B, Nk, Hkv, D), dtype),
            make(rng, (B, Nk, Hkv, D), dtype))


CASES = [
    dict(),
    dict(causal=True),
    dict(causal=True, causal_alignment="bottom_right"),
    dict(window=(3, 2)),
    dict(window=(4, None), causal=True, causal_alignment="bottom_right"),
    dict(softcap=2.5),
    dict(softmax_scale=0.3),
]


def ref_kwargs(kw):
    window = kw.get("window") or (-1, -1)
    return dict(causal=kw.get("causal", False),
                bottom_right=kw.get("causal_alignment") == "bottom_right",
                window=tuple(-1 if w is None else w for w in window),
                scale=kw.get("softmax_scale"), softcap=kw.get("softcap", 0.0))


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("kw", CASES, ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()) or "plain")
def test_forward_matches_reference(rng, dtype, kw):
    q, k, v = qkv(rng, dtype=dtype)
    o, lse = flashpp.attention(q, k, v, return_lse=True, **kw)
    ro, rlse, _ = ref_forward(q, k, v, **ref_kwargs(kw))
    assert o.dtype == q.dtype and o.shape == q.shape
    assert lse.dtype == np.float32 and lse.shape == (2, 4, 13)
    assert rel_err(o, ro) < TOL[dtype]
    finite = np.isfinite(rlse)
    assert np.array_equal(np.isfinite(lse), finite)
    assert rel_err(lse[finite], rlse[finite]) < 1e-5


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("kw", CASES[:5], ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()) or "plain")
def test_backward_matches_reference(rng, dtype, kw):
    q, k, v = qkv(rng, Nq=9, Nk=11, dtype=dtype)
    o, lse = flashpp.attention(q, k, v, return_lse=True, **kw)
    dout = make(rng, o.shape, dtype)
    dq, dk, dv = flashpp.attention_backward(q, k, v, o, lse, dout, **kw)
    _, _, cache = ref_forward(q, k, v, **ref_kwargs(kw))
    rq, rk, rv = ref_backward(dout, cache)
    for got, want in ((dq, rq), (dk, rk), (dv, rv)):
        assert got.dtype == q.dtype
        assert rel_err(got, want) < 2 * TOL[dtype]


def test_bhnd_layout_is_a_view_of_the_same_math(rng):
    q, k, v = qkv(rng)
    o = flashpp.attention(q, k, v, causal=True)
    t = lambda x: np.ascontiguousarray(x.transpose(0, 2, 1, 3))  # noqa: E731
    o_bhnd = flashpp.attention(t(q), t(k), t(v), causal=True, layout="bhnd")
    assert o_bhnd.shape == (2, 4, 13, 16)
    np.testing.assert_allclose(o_bhnd.transpose(0, 2, 1, 3), o, rtol=1e-6, atol=1e-6)


def test_strided_and_noncontiguous_inputs(rng):
    big_q = make(rng, (2, 26, 6, 24), "float32")
    big_k = make(rng, (2, 17, 5, 16), "float32")
    q = big_q[:, ::2, 1:5, 4:20]          # every stride unusual, last dim contiguous
    k = big_k[:, :, 1:3, :]
    v = np.asfortranarray(make(rng, (2, 17, 2, 16), "float32"))  # last dim NOT contiguous: copied
    o = flashpp.attention(q, k, v)
    ro, _, _ = ref_forward(q, k, v)
    assert rel_err(o, ro) < 1e-5


def test_read_only_inputs(rng):
    q, k, v = qkv(rng)
    for x in (q, k, v):
        x.setflags(write=False)
    o = flashpp.attention(q, k, v)
    assert rel_err(o, ref_forward(q, k, v)[0]) < 1e-5


def test_empty_keys_give_zero_output_and_minus_inf_lse(rng):
    q, k, v = qkv(rng, Nk=0)
    o, lse = flashpp.attention(q, k, v, return_lse=True)
    assert np.all(o == 0) and np.all(np.isneginf(lse))


def test_rows_without_keys_are_zero_not_nan(rng):
    # bottom-right with Nq > Nk: the first Nq - Nk queries see nothing.
    q, k, v = qkv(rng, Nq=9, Nk=4)
    o, lse = flashpp.attention(q, k, v, causal=True, causal_alignment="bottom_right",
                               return_lse=True)
    assert np.all(o[:, :5] == 0) and np.all(np.isneginf(lse[:, :, :5]))
    assert np.all(np.isfinite(o))


def test_reference_backend_takes_float64(rng):
    q, k, v = (x.astype(np.float64) for x in qkv(rng))
    o = flashpp.attention(q, k, v, causal=True, backend="cpu_reference")
    assert o.dtype == np.float64
    assert rel_err(o, ref_forward(q, k, v, causal=True)[0]) < 1e-12


def test_dropout_applies_exactly_the_published_mask(rng):
    q, k, v = qkv(rng)
    p, seed, offset = 0.3, 1234567, 42
    o, lse = flashpp.attention(q, k, v, dropout_p=p, seed=seed, offset=offset, return_lse=True)
    keep = flashpp.dropout_keep_mask(p, seed, offset, 2, 4, 13, 17)
    ro, rlse, cache = ref_forward(q, k, v, dropout_p=p, keep=keep)
    assert rel_err(o, ro) < 1e-5
    assert rel_err(lse, rlse) < 1e-5  # lse is computed without dropout
    dout = make(rng, o.shape, "float32")
    grads = flashpp.attention_backward(q, k, v, o, lse, dout, dropout_p=p, seed=seed,
                                       offset=offset)
    for got, want in zip(grads, ref_backward(dout, cache)):
        assert rel_err(got, want) < 1e-5


def test_dropout_seed_none_draws_and_returns_the_rng_state(rng):
    q, k, v = qkv(rng)
    o1, (s1, off1) = flashpp.attention(q, k, v, dropout_p=0.5, return_rng_state=True)
    o2, (s2, off2) = flashpp.attention(q, k, v, dropout_p=0.5, return_rng_state=True)
    assert off2 == off1 + 1 and not np.array_equal(o1, o2)
    again = flashpp.attention(q, k, v, dropout_p=0.5, seed=s1, offset=off1)
    np.testing.assert_array_equal(again, o1)
    np.random.seed(7)
    _, (a, _) = flashpp.attention(q, k, v, dropout_p=0.5, return_rng_state=True)
    np.random.seed(7)
    _, (b, _) = flashpp.attention(q, k, v, dropout_p=0.5, return_rng_state=True)
    assert a == b  # seeds follow numpy's global generator


def test_dropout_keep_fraction():
    keep = flashpp.dropout_keep_mask(0.25, 99, 3, 2, 3, 64, 128)
    n = keep.size
    assert abs(keep.mean() - 0.75) < 4 * np.sqrt(0.25 * 0.75 / n)
    assert not np.array_equal(keep, flashpp.dropout_keep_mask(0.25, 99, 4, 2, 3, 64, 128))


def test_backward_with_dropout_needs_the_seed(rng):
    q, k, v = qkv(rng)
    o, lse = flashpp.attention(q, k, v, return_lse=True)
    with pytest.raises(ValueError, match="seed and offset"):
        flashpp.attention_backward(q, k, v, o, lse, o, dropout_p=0.1)


@pytest.mark.parametrize(
    "mutate, exc, match",
    [
        (lambda q, k, v: (q.astype(np.int32), k, v), TypeError, "dtype"),
        (lambda q, k, v: (q, k.astype(np.float16), v), ValueError, "k: expected dtype"),
        (lambda q, k, v: (q, k[:, :, :1], v), ValueError, "v: expected the shape of k"),
        (lambda q, k, v: (q[..., :8], k, v), ValueError, "head dim"),
        (lambda q, k, v: (q[:, :, :3], k, v), ValueError, "divides"),
        (lambda q, k, v: (q[0], k, v), ValueError, "4-d"),
    ],
)
def test_errors_name_the_argument(rng, mutate, exc, match):
    q, k, v = mutate(*qkv(rng))
    with pytest.raises(exc, match=match):
        flashpp.attention(q, k, v)


@pytest.mark.parametrize(
    "kw, exc, match",
    [
        (dict(dropout_p=1.0), ValueError, "dropout_p"),
        (dict(softcap=-1.0), ValueError, "softcap"),
        (dict(causal=True, window=(2, 3)), ValueError, "window_right"),
        (dict(causal_alignment="middle"), ValueError, "causal_alignment"),
        (dict(layout="nbhd"), ValueError, "layout"),
        (dict(softmax_scale=-2.0), ValueError, "softmax_scale"),
        (dict(backend="tpu"), ValueError, "backend"),
        (dict(backend="cuda"), ValueError, "CUDA device"),
        (dict(window="wide"), TypeError, "window"),
    ],
)
def test_bad_options_raise(rng, kw, exc, match):
    with pytest.raises(exc, match=match):
        flashpp.attention(*qkv(rng), **kw)


def test_float64_needs_the_reference_backend(rng):
    q, k, v = (x.astype(np.float64) for x in qkv(rng))
    with pytest.raises(TypeError, match="f64"):
        flashpp.attention(q, k, v)


def test_calls_from_threads_run_concurrently_and_agree(rng):
    # The GIL is released inside flashpp: threads must not corrupt each other's results.
    inputs = [qkv(np.random.default_rng(i), Nq=64, Nk=64) for i in range(4)]
    expected = [flashpp.attention(*x, causal=True) for x in inputs]
    results = [None] * 4

    def work(i):
        results[i] = flashpp.attention(*inputs[i], causal=True)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for got, want in zip(results, expected):
        np.testing.assert_array_equal(got, want)


def test_version_and_capabilities():
    assert flashpp.__version__ == "0.1.0"
    assert isinstance(flashpp.cuda_compiled(), bool)
    assert isinstance(flashpp.cuda_available(), bool)
    assert flashpp.cuda_release_scratch() is None  # a no-op without CUDA scratch; never raises


def test_configs_are_remembered_without_changing_the_checks():
    from flashpp._options import make_config

    a = make_config(causal=True, window=5)
    assert make_config(causal=True, window=5) is a
    assert (a.window_left, a.window_right) == (5, 0)
    # Equal but differently typed arguments are checked on their own.
    with pytest.raises(TypeError, match="window"):
        make_config(causal=True, window=5.0)
    make_config(window=1)
    with pytest.raises(TypeError, match="window"):
        make_config(window=True)
    assert make_config(window=[3, None]).window_left == 3  # unhashable: built every call
    with pytest.raises(ValueError, match="softmax_scale"):
        make_config(softmax_scale=-1.0)
    assert make_config(softmax_scale=0.5) == make_config(softmax_scale=0.5)
