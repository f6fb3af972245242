//! Unit tier: the CPU reference convolution (`cudnn::reference::conv`).
//!
//! Hand-computed cases (the arithmetic is in the comments), the adjoint
//! identities `<conv(x,w), dy> = <x, bwd_data(dy,w)> = <w, bwd_filter(x,dy)>`
//! over many configurations, finite differences, the bias gradient, layout
//! and mode consistency, groups as separate convolutions, an independent
//! naive 2-d loop, and validation errors.

use crate::support;

use cudnn::Error;
use cudnn::dnn::ActivationMode;
use cudnn::reference::conv::{
    self, BiasActivation, ConvMode, ConvParams, Layout, backward_bias, backward_data,
    backward_filter, bias_activation_forward, convert_layout, forward,
};
use support::*;

const CF: Layout = Layout::ChannelsFirst;
const CL: Layout = Layout::ChannelsLast;

/// splitmix64: reproducible random numbers without a dependency.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        crate::support::splitmix64(&mut self.0)
    }
    /// Uniform in [-1, 1).
    fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    }
    fn vec(&mut self, n: usize) -> Vec<f64> {
        (0..n).map(|_| self.uniform()).collect()
    }
}

fn count(shape: &[usize]) -> usize {
    shape.iter().product()
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn norm(a: &[f64]) -> f64 {
    dot(a, a).sqrt()
}

/// `value <= bound`, false when either is NaN (so NaN never passes).
fn within(value: f64, bound: f64) -> bool {
    value <= bound
}

fn err(e: Error) -> String {
    e.to_string()
}

/// Exact comparison for hand cases (all values are small integers or exact binary fractions).
fn same(what: &str, got: &[f64], want: &[f64]) -> TestResult {
    ensure!(got == want, "{what}: got {got:?}, want {want:?}");
    Ok(())
}

fn close(what: &str, got: &[f64], want: &[f64], tol: f64) -> TestResult {
    same_len(what, got, want)?;
    let scale = norm(want).max(1e-300);
    let diff: Vec<f64> = got.iter().zip(want).map(|(a, b)| a - b).collect();
    ensure!(
        got.iter().all(|v| v.is_finite()) && norm(&diff) <= tol * scale,
        "{what}: relative difference {} > {tol}\n got  {got:?}\n want {want:?}",
        norm(&diff) / scale
    );
    Ok(())
}

/// One convolution problem.
#[derive(Clone)]
struct Case {
    name: String,
    x: Vec<usize>,
    w: Vec<usize>,
    p: ConvParams,
}

fn case(name: &str, x: &[usize], w: &[usize], p: ConvParams) -> Case {
    Case {
        name: name.into(),
        x: x.to_vec(),
        w: w.to_vec(),
        p,
    }
}

/// The base configurations (cross-correlation); [`all_cases`] adds both
/// modes, and callers both layouts.
fn base_cases() -> Vec<Case> {
    let p1 = ConvParams::new(1);
    let p2 = ConvParams::new(2);
    let p3 = ConvParams::new(3);
    vec![
        case("1d plain", &[2, 3, 7], &[4, 3, 3], p1.clone()),
        case(
            "1d pad stride",
            &[2, 3, 8],
            &[2, 3, 3],
            p1.clone().with_pad(&[1]).with_stride(&[2]),
        ),
        case(
            "1d dilation pad stride",
            &[1, 2, 11],
            &[3, 2, 3],
            p1.clone()
                .with_pad(&[2])
                .with_stride(&[3])
                .with_dilation(&[2]),
        ),
        case(
            "1d depthwise",
            &[2, 3, 6],
            &[3, 1, 3],
            p1.clone().with_groups(3).with_pad(&[1]),
        ),
        case("1d pad > window", &[1, 1, 3], &[2, 1, 2], p1.with_pad(&[3])),
        case("2d plain", &[2, 3, 5, 4], &[4, 3, 3, 2], p2.clone()),
        case(
            "2d groups pad stride dilation",
            &[2, 4, 6, 5],
            &[6, 2, 3, 2],
            p2.clone()
                .with_groups(2)
                .with_pad(&[1, 0])
                .with_stride(&[2, 1])
                .with_dilation(&[1, 2]),
        ),
        case(
            "2d depthwise",
            &[1, 3, 5, 5],
            &[3, 1, 3, 3],
            p2.clone().with_groups(3).with_pad(&[1, 1]),
        ),
        case(
            "2d depthwise multiplier 2",
            &[2, 2, 5, 4],
            &[4, 1, 2, 3],
            p2.clone().with_groups(2).with_pad(&[0, 1]),
        ),
        case(
            "2d stride > window (skipped inputs)",
            &[1, 2, 7, 7],
            &[3, 2, 2, 2],
            p2.clone().with_stride(&[3, 3]),
        ),
        case(
            "2d 1x1 stride 2",
            &[2, 5, 4, 4],
            &[3, 5, 1, 1],
            p2.clone().with_stride(&[2, 2]),
        ),
        case(
            "2d dilated padded stride 2",
            &[1, 2, 9, 8],
            &[2, 2, 3, 3],
            p2.with_pad(&[2, 1])
                .with_stride(&[2, 2])
                .with_dilation(&[2, 3]),
        ),
        case(
            "3d groups mixed",
            &[1, 2, 4, 5, 3],
            &[4, 1, 2, 3, 2],
            p3.clone()
                .with_groups(2)
                .with_pad(&[1, 1, 0])
                .with_stride(&[1, 2, 1])
                .with_dilation(&[2, 1, 1]),
        ),
        case(
            "3d padded",
            &[2, 3, 3, 3, 3],
            &[2, 3, 3, 3, 3],
            p3.clone().with_pad(&[1, 1, 1]),
        ),
        case(
            "3d depthwise strided",
            &[1, 2, 5, 4, 4],
            &[2, 1, 2, 2, 2],
            p3.with_groups(2)
                .with_stride(&[2, 2, 2])
                .with_pad(&[1, 0, 1]),
        ),
    ]
}

fn all_cases() -> Vec<Case> {
    let mut out = Vec::new();
    for c in base_cases() {
        let mut conv = c.clone();
        conv.name = format!("{} (convolution)", c.name);
        conv.p.mode = ConvMode::Convolution;
        out.push(c);
        out.push(conv);
    }
    out
}

fn layouts() -> [Layout; 2] {
    [CF, CL]
}

/// Filter flipped in every spatial dimension (channels-first).
fn flip(w: &[f64], shape: &[usize]) -> Vec<f64> {
    let strides: Vec<usize> = (0..shape.len())
        .map(|d| shape[d + 1..].iter().product())
        .collect();
    let mut out = vec![0.0; w.len()];
    for (lin, &v) in w.iter().enumerate() {
        let mut dst = 0;
        for d in 0..shape.len() {
            let i = lin / strides[d] % shape[d];
            let j = if d >= 2 { shape[d] - 1 - i } else { i };
            dst += j * strides[d];
        }
        out[dst] = v;
    }
    out
}

/// An independent 2-d cross-correlation, NCHW, written out as plain nested loops.
fn naive_2d(x: &[f64], xs: &[usize], w: &[f64], ws: &[usize], p: &ConvParams) -> Vec<f64> {
    let (n, c, h, wd) = (xs[0], xs[1], xs[2] as i64, xs[3] as i64);
    let (k, cg, r, s) = (ws[0], ws[1], ws[2], ws[3]);
    let (ph, pw) = (p.pad[0] as i64, p.pad[1] as i64);
    let (sh, sw) = (p.stride[0] as i64, p.stride[1] as i64);
    let (dh, dw) = (p.dilation[0] as i64, p.dilation[1] as i64);
    let oh = (h + 2 * ph - dh * (r as i64 - 1) - 1) / sh + 1;
    let ow = (wd + 2 * pw - dw * (s as i64 - 1) - 1) / sw + 1;
    let kpg = k / p.groups;
    let mut y = Vec::new();
    for b in 0..n {
        for kk in 0..k {
            let g = kk / kpg;
            for oy in 0..oh {
                for ox in 0..ow {
                    let mut acc = 0.0;
                    for cl in 0..cg {
                        let ch = g * cg + cl;
                        for fy in 0..r {
                            for fx in 0..s {
                                let iy = oy * sh - ph + fy as i64 * dh;
                                let ix = ox * sw - pw + fx as i64 * dw;
                                if iy < 0 || iy >= h || ix < 0 || ix >= wd {
                                    continue;
                                }
                                let xi = ((b * c + ch) * h as usize + iy as usize) * wd as usize
                                    + ix as usize;
                                let wi = ((kk * cg + cl) * r + fy) * s + fx;
                                acc += x[xi] * w[wi];
                            }
                        }
                    }
                    y.push(acc);
                }
            }
        }
    }
    y
}

fn hand_forward() -> TestResult {
    // 1-d, x = [1, 2, 3, 4], w = [1, 0, -1], no padding:
    // y0 = 1*1 + 2*0 + 3*(-1) = -2;  y1 = 2*1 + 3*0 + 4*(-1) = -2.
    let x = [1.0, 2.0, 3.0, 4.0];
    let w = [1.0, 0.0, -1.0];
    let (y, ys) = forward(&x, &[1, 1, 4], &w, &[1, 1, 3], &ConvParams::new(1), CF).map_err(err)?;
    ensure!(ys == [1, 1, 2], "shape {ys:?}");
    same("1d cross-correlation", &y, &[-2.0, -2.0])?;

    // Same, true convolution: the filter is used flipped, [-1, 0, 1]:
    // y0 = -1 + 0 + 3 = 2;  y1 = -2 + 0 + 4 = 2.
    let p = ConvParams::new(1).with_mode(ConvMode::Convolution);
    let (y, _) = forward(&x, &[1, 1, 4], &w, &[1, 1, 3], &p, CF).map_err(err)?;
    same("1d convolution", &y, &[2.0, 2.0])?;

    // 1-d dilation 2: x = [1, 2, 3, 4, 5], w = [1, 10]; out = (5 - 2*1 - 1)/1 + 1 = 3,
    // y[o] = x[o] + 10*x[o+2] = [1 + 30, 2 + 40, 3 + 50] = [31, 42, 53].
    let p = ConvParams::new(1).with_dilation(&[2]);
    let (y, _) = forward(
        &[1.0, 2.0, 3.0, 4.0, 5.0],
        &[1, 1, 5],
        &[1.0, 10.0],
        &[1, 1, 2],
        &p,
        CF,
    )
    .map_err(err)?;
    same("1d dilation", &y, &[31.0, 42.0, 53.0])?;

    // 2-d, x = [[1,2,3],[4,5,6],[7,8,9]], w = [[1,0],[0,1]] (main diagonal),
    // pad 1, stride 2: out = (3 + 2 - 1 - 1)/2 + 1 = 2 per dimension.
    // Output (oy, ox) reads padded rows/cols 2*o - 1 and 2*o:
    // (0,0): x(-1,-1) + x(0,0) = 0 + 1 = 1
    // (0,1): x(-1, 1) + x(0,2) = 0 + 3 = 3
    // (1,0): x( 1,-1) + x(2,0) = 0 + 7 = 7
    // (1,1): x( 1, 1) + x(2,2) = 5 + 9 = 14
    let x: Vec<f64> = (1..=9).map(f64::from).collect();
    let p = ConvParams::new(2).with_pad(&[1, 1]).with_stride(&[2, 2]);
    let (y, ys) = forward(
        &x,
        &[1, 1, 3, 3],
        &[1.0, 0.0, 0.0, 1.0],
        &[1, 1, 2, 2],
        &p,
        CF,
    )
    .map_err(err)?;
    ensure!(ys == [1, 1, 2, 2], "shape {ys:?}");
    same("2d pad stride", &y, &[1.0, 3.0, 7.0, 14.0])?;
    // The main diagonal is its own flip in both dimensions, so convolution mode agrees.
    let pc = p.clone().with_mode(ConvMode::Convolution);
    let (y, _) = forward(
        &x,
        &[1, 1, 3, 3],
        &[1.0, 0.0, 0.0, 1.0],
        &[1, 1, 2, 2],
        &pc,
        CF,
    )
    .map_err(err)?;
    same(
        "2d symmetric filter convolution",
        &y,
        &[1.0, 3.0, 7.0, 14.0],
    )?;
    // w = [[1, 2], [3, 4]], same x, pad and stride. x(r, c) = 3r + c + 1 inside, 0 outside.
    // (0,0): rows -1,0 cols -1,0: 4*x(0,0) = 4
    // (0,1): rows -1,0 cols  1,2: 3*x(0,1) + 4*x(0,2) = 6 + 12 = 18
    // (1,0): rows  1,2 cols -1,0: 2*x(1,0) + 4*x(2,0) = 8 + 28 = 36
    // (1,1): rows  1,2 cols  1,2: 1*5 + 2*6 + 3*8 + 4*9 = 5 + 12 + 24 + 36 = 77
    let w = [1.0, 2.0, 3.0, 4.0];
    let (y, _) = forward(&x, &[1, 1, 3, 3], &w, &[1, 1, 2, 2], &p, CF).map_err(err)?;
    same("2d pad stride, full filter", &y, &[4.0, 18.0, 36.0, 77.0])?;
    // Convolution mode uses the flipped filter [[4, 3], [2, 1]]:
    // (0,0): 1*x(0,0) = 1
    // (0,1): 2*x(0,1) + 1*x(0,2) = 4 + 3 = 7
    // (1,0): 3*x(1,0) + 1*x(2,0) = 12 + 7 = 19
    // (1,1): 4*5 + 3*6 + 2*8 + 1*9 = 20 + 18 + 16 + 9 = 63
    let (y, _) = forward(&x, &[1, 1, 3, 3], &w, &[1, 1, 2, 2], &pc, CF).map_err(err)?;
    same("2d pad stride convolution", &y, &[1.0, 7.0, 19.0, 63.0])?;

    // Groups: x has 2 channels of length 2, [1, 2 | 3, 4].
    // groups = 2, w = [2 | 3] (shape [2, 1, 1]): y = [2*1, 2*2 | 3*3, 3*4] = [2, 4 | 9, 12].
    let x = [1.0, 2.0, 3.0, 4.0];
    let p = ConvParams::new(1).with_groups(2);
    let (y, _) = forward(&x, &[1, 2, 2], &[2.0, 3.0], &[2, 1, 1], &p, CF).map_err(err)?;
    same("depthwise 1x1", &y, &[2.0, 4.0, 9.0, 12.0])?;
    // groups = 1, w = [[1, 1], [1, -1]] (shape [2, 2, 1]): y0 = c0 + c1 = [4, 6],
    // y1 = c0 - c1 = [-2, -2].
    let (y, _) = forward(
        &x,
        &[1, 2, 2],
        &[1.0, 1.0, 1.0, -1.0],
        &[2, 2, 1],
        &ConvParams::new(1),
        CF,
    )
    .map_err(err)?;
    same("dense 1x1", &y, &[4.0, 6.0, -2.0, -2.0])?;

    // 3-d: x = 1..8 in a 2x2x2 cube, w = all ones 2x2x2: y = 1+2+...+8 = 36.
    let x: Vec<f64> = (1..=8).map(f64::from).collect();
    let (y, ys) = forward(
        &x,
        &[1, 1, 2, 2, 2],
        &[1.0; 8],
        &[1, 1, 2, 2, 2],
        &ConvParams::new(3),
        CF,
    )
    .map_err(err)?;
    ensure!(ys == [1, 1, 1, 1, 1], "shape {ys:?}");
    same("3d", &y, &[36.0])?;
    // w = [1, 0, 0, 0, 0, 0, 0, 0] picks x(0,0,0) = 1 in cross-correlation, and
    // (flipped) x(1,1,1) = 8 in convolution.
    let mut w = [0.0; 8];
    w[0] = 1.0;
    let p = ConvParams::new(3);
    let (y, _) = forward(&x, &[1, 1, 2, 2, 2], &w, &[1, 1, 2, 2, 2], &p, CF).map_err(err)?;
    same("3d corner", &y, &[1.0])?;
    let p = p.with_mode(ConvMode::Convolution);
    let (y, _) = forward(&x, &[1, 1, 2, 2, 2], &w, &[1, 1, 2, 2, 2], &p, CF).map_err(err)?;
    same("3d corner flipped", &y, &[8.0])?;
    Ok(())
}

fn hand_nhwc() -> TestResult {
    // 1x2 image, 2 channels, NHWC memory [pix0: c0, c1, pix1: c0, c1] = [1, 10, 2, 20].
    // 1x1 filter, 2 outputs: k0 = c0 + c1, k1 = c1 (logical w [[1, 1], [0, 1]], the
    // same memory in both layouts for a 1x1 window).
    // k0 = [1 + 10, 2 + 20] = [11, 22], k1 = [10, 20]; NHWC output memory
    // [pix0: k0, k1, pix1: k0, k1] = [11, 10, 22, 20].
    let (y, ys) = forward(
        &[1.0, 10.0, 2.0, 20.0],
        &[1, 2, 1, 2],
        &[1.0, 1.0, 0.0, 1.0],
        &[2, 2, 1, 1],
        &ConvParams::new(2),
        CL,
    )
    .map_err(err)?;
    ensure!(ys == [1, 2, 1, 2], "shape {ys:?}");
    same("nhwc 1x1", &y, &[11.0, 10.0, 22.0, 20.0])?;

    // A channels-last filter: 1-d, 2 input channels, window 2. Logical w[0] =
    // [[1, 2], [3, 4]] (channel, tap); channels-last memory [tap0: c0, c1, tap1: c0, c1]
    // = [1, 3, 2, 4]. Input, logical [[1, 1], [0, 1]] (channel, position), memory
    // [pos0: 1, 0, pos1: 1, 1]. y = 1*1 + 2*1 + 3*0 + 4*1 = 7.
    let (y, _) = forward(
        &[1.0, 0.0, 1.0, 1.0],
        &[1, 2, 2],
        &[1.0, 3.0, 2.0, 4.0],
        &[1, 2, 2],
        &ConvParams::new(1),
        CL,
    )
    .map_err(err)?;
    same("channels-last filter", &y, &[7.0])?;
    Ok(())
}

fn hand_backward() -> TestResult {
    // x length 3, w = [1, 2]: y0 = x0 + 2*x1, y1 = x1 + 2*x2.
    // dy = [1, 1]: dx0 = 1*1 = 1, dx1 = 2*1 + 1*1 = 3, dx2 = 2*1 = 2.
    let p = ConvParams::new(1);
    let dx = backward_data(
        &[1.0, 1.0],
        &[1, 1, 2],
        &[1.0, 2.0],
        &[1, 1, 2],
        &[1, 1, 3],
        &p,
        CF,
    )
    .map_err(err)?;
    same("bwd data", &dx, &[1.0, 3.0, 2.0])?;

    // Stride 2, x length 4, w = [1, 2]: out = (4 - 2)/2 + 1 = 2,
    // y0 = x0 + 2*x1, y1 = x2 + 2*x3. dy = [1, 10]: dx = [1, 2, 10, 20].
    let ps = ConvParams::new(1).with_stride(&[2]);
    let dx = backward_data(
        &[1.0, 10.0],
        &[1, 1, 2],
        &[1.0, 2.0],
        &[1, 1, 2],
        &[1, 1, 4],
        &ps,
        CF,
    )
    .map_err(err)?;
    same("bwd data stride", &dx, &[1.0, 2.0, 10.0, 20.0])?;

    // Stride 2 with x length 5: out = (5 - 2)/2 + 1 = 2; x4 is read by nobody, dx4 = 0.
    let dx = backward_data(
        &[1.0, 10.0],
        &[1, 1, 2],
        &[1.0, 2.0],
        &[1, 1, 2],
        &[1, 1, 5],
        &ps,
        CF,
    )
    .map_err(err)?;
    same("bwd data unread input", &dx, &[1.0, 2.0, 10.0, 20.0, 0.0])?;

    // Padding 1, x length 2, w = [1, 2, 3]: out = (2 + 2 - 3)/1 + 1 = 2,
    // y0 = 1*0 + 2*x0 + 3*x1, y1 = 1*x0 + 2*x1 + 3*0.
    // dy = [1, 1]: dx0 = 2 + 1 = 3, dx1 = 3 + 2 = 5.
    let pp = ConvParams::new(1).with_pad(&[1]);
    let dx = backward_data(
        &[1.0, 1.0],
        &[1, 1, 2],
        &[1.0, 2.0, 3.0],
        &[1, 1, 3],
        &[1, 1, 2],
        &pp,
        CF,
    )
    .map_err(err)?;
    same("bwd data pad", &dx, &[3.0, 5.0])?;

    // Backward filter, x = [1, 2, 3], dy = [1, 10], window 2:
    // dw0 = x0*dy0 + x1*dy1 = 1 + 20 = 21;  dw1 = x1*dy0 + x2*dy1 = 2 + 30 = 32.
    let dw = backward_filter(
        &[1.0, 2.0, 3.0],
        &[1, 1, 3],
        &[1.0, 10.0],
        &[1, 1, 2],
        &[1, 1, 2],
        &p,
        CF,
    )
    .map_err(err)?;
    same("bwd filter", &dw, &[21.0, 32.0])?;
    // Convolution mode uses w[1 - f] where cross-correlation uses w[f]: dw = [32, 21].
    let pc = p.clone().with_mode(ConvMode::Convolution);
    let dw = backward_filter(
        &[1.0, 2.0, 3.0],
        &[1, 1, 3],
        &[1.0, 10.0],
        &[1, 1, 2],
        &[1, 1, 2],
        &pc,
        CF,
    )
    .map_err(err)?;
    same("bwd filter convolution", &dw, &[32.0, 21.0])?;

    // Batch 2 sums: second sample x = [0, 1, 0], dy = [2, 0]:
    // dw0 += 0*2 + 1*0 = 0, dw1 += 1*2 + 0*0 = 2  ->  [21, 34].
    let dw = backward_filter(
        &[1.0, 2.0, 3.0, 0.0, 1.0, 0.0],
        &[2, 1, 3],
        &[1.0, 10.0, 2.0, 0.0],
        &[2, 1, 2],
        &[1, 1, 2],
        &p,
        CF,
    )
    .map_err(err)?;
    same("bwd filter batch", &dw, &[21.0, 34.0])?;
    Ok(())
}

fn hand_bias() -> TestResult {
    // dy logical [n=2, k=2, 1, 2]: n0: k0 [1, 2], k1 [3, 4]; n1: k0 [5, 6], k1 [7, 8].
    // db0 = 1 + 2 + 5 + 6 = 14, db1 = 3 + 4 + 7 + 8 = 22.
    let shape = [2, 2, 1, 2];
    let nchw: Vec<f64> = (1..=8).map(f64::from).collect();
    let db = backward_bias(&nchw, &shape, CF).map_err(err)?;
    same("bias nchw", &db, &[14.0, 22.0])?;
    // The same tensor in NHWC memory: n0 (w0: 1, 3), (w1: 2, 4); n1 (5, 7), (6, 8).
    let nhwc = [1.0, 3.0, 2.0, 4.0, 5.0, 7.0, 6.0, 8.0];
    let db = backward_bias(&nhwc, &shape, CL).map_err(err)?;
    same("bias nhwc", &db, &[14.0, 22.0])?;
    let converted = convert_layout(&nchw, &shape, CF, CL).map_err(err)?;
    same("convert_layout nchw -> nhwc", &converted, &nhwc)?;
    Ok(())
}

fn hand_fused() -> TestResult {
    // conv(x = [1, 2, 3, 4], w = [1, 0, -1]) = [-2, -2] (see hand_forward).
    // alpha1 = 2, z = [1, 5], alpha2 = 1, bias 0.5:
    // [2*(-2) + 1 + 0.5, 2*(-2) + 5 + 0.5] = [-2.5, 1.5].
    let x = [1.0, 2.0, 3.0, 4.0];
    let w = [1.0, 0.0, -1.0];
    let z = [1.0, 5.0];
    let mut fused = BiasActivation {
        alpha1: 2.0,
        z: Some(&z),
        alpha2: 1.0,
        bias: &[0.5],
        activation: ActivationMode::Identity,
    };
    let p = ConvParams::new(1);
    let run = |f: &BiasActivation<'_>| {
        bias_activation_forward(&x, &[1, 1, 4], &w, &[1, 1, 3], &p, CF, f).map(|r| r.0)
    };
    same("fused identity", &run(&fused).map_err(err)?, &[-2.5, 1.5])?;
    // ReLU: [max(-2.5, 0), max(1.5, 0)] = [0, 1.5].
    fused.activation = ActivationMode::Relu;
    same("fused relu", &run(&fused).map_err(err)?, &[0.0, 1.5])?;
    // Clipped at 1: [0, min(1.5, 1)] = [0, 1].
    fused.activation = ActivationMode::ClippedRelu { ceiling: 1.0 };
    same("fused clipped", &run(&fused).map_err(err)?, &[0.0, 1.0])?;
    // No z: [2*(-2) + 0.5, 2*(-2) + 0.5] = [-3.5, -3.5].
    fused.z = None;
    fused.activation = ActivationMode::Identity;
    same("fused no z", &run(&fused).map_err(err)?, &[-3.5, -3.5])?;

    // Activations at points with exact values, through a 1x1 identity convolution
    // (w = [1], bias 0) of x = [0, -ln 2, ln 3]:
    // sigmoid(0) = 1/2; tanh(0) = 0;
    // elu(alpha 2)(-ln 2) = 2*(e^-ln2 - 1) = 2*(1/2 - 1) = -1;
    // swish(beta 1)(ln 3) = ln3 * 1/(1 + 1/3) = ln3 * 3/4.
    let ln2 = std::f64::consts::LN_2;
    let ln3 = 3f64.ln();
    let xs = [0.0, -ln2, ln3];
    let act = |m: ActivationMode| {
        let f = BiasActivation {
            bias: &[0.0],
            activation: m,
            ..BiasActivation::default()
        };
        bias_activation_forward(&xs, &[1, 1, 3], &[1.0], &[1, 1, 1], &p, CF, &f).map(|r| r.0)
    };
    let s = act(ActivationMode::Sigmoid).map_err(err)?;
    close("sigmoid(0)", &s[..1], &[0.5], 1e-15)?;
    let t = act(ActivationMode::Tanh).map_err(err)?;
    close("tanh(0)", &t[..1], &[0.0], 1e-15)?;
    let e = act(ActivationMode::Elu { alpha: 2.0 }).map_err(err)?;
    close("elu", &e, &[0.0, -1.0, ln3], 1e-14)?;
    let sw = act(ActivationMode::Swish { beta: 1.0 }).map_err(err)?;
    close("swish(ln 3)", &sw[2..], &[ln3 * 0.75], 1e-14)?;
    // NaN propagates through ReLU.
    let f = BiasActivation {
        bias: &[0.0],
        activation: ActivationMode::Relu,
        ..BiasActivation::default()
    };
    let (y, _) = bias_activation_forward(&[f64::NAN], &[1, 1, 1], &[1.0], &[1, 1, 1], &p, CF, &f)
        .map_err(err)?;
    ensure!(y[0].is_nan(), "relu(NaN) = {}", y[0]);
    Ok(())
}

fn adjoint() -> TestResult {
    let mut rng = Rng(1);
    let mut checked = 0;
    for c in all_cases() {
        for layout in layouts() {
            let y_shape = c.p.output_shape(&c.x, &c.w).map_err(err)?;
            let x = rng.vec(count(&c.x));
            let w = rng.vec(count(&c.w));
            let dy = rng.vec(count(&y_shape));
            let (y, ys) = forward(&x, &c.x, &w, &c.w, &c.p, layout).map_err(err)?;
            ensure!(ys == y_shape, "{}: shape {ys:?} vs {y_shape:?}", c.name);
            let dx = backward_data(&dy, &y_shape, &w, &c.w, &c.x, &c.p, layout).map_err(err)?;
            let dw = backward_filter(&x, &c.x, &dy, &y_shape, &c.w, &c.p, layout).map_err(err)?;
            let a = dot(&y, &dy);
            let b = dot(&x, &dx);
            let d = dot(&w, &dw);
            // Cauchy-Schwarz scale: no cancellation can hide an error larger than this.
            let scale = norm(&y) * norm(&dy) + norm(&x) * norm(&dx) + norm(&w) * norm(&dw);
            ensure!(
                (a - b).abs() <= 1e-10 * scale && (a - d).abs() <= 1e-10 * scale,
                "{} {layout:?}: <y,dy> = {a}, <x,dx> = {b}, <w,dw> = {d} (scale {scale})",
                c.name
            );
            ensure!(
                within(1e-6 * scale, a.abs()),
                "{} {layout:?}: degenerate test, <y,dy> = {a}",
                c.name
            );
            checked += 1;
        }
    }
    ensure!(checked == 60, "checked {checked} configurations");
    Ok(())
}

/// Loss `L = sum(y^2) / 2`, so `dL/dy = y`, `dL/dx = bwd_data(y)`, `dL/dw = bwd_filter(y)`.
fn finite_differences() -> TestResult {
    let mut rng = Rng(2);
    let picks = [
        &base_cases()[6],  // 2d groups pad stride dilation
        &base_cases()[12], // 3d groups mixed
        &base_cases()[2],  // 1d dilation pad stride
    ];
    for (ci, c) in picks.into_iter().enumerate() {
        for (mode, layout) in [
            (ConvMode::Convolution, CL),
            (ConvMode::CrossCorrelation, CF),
        ] {
            let p = c.p.clone().with_mode(mode);
            let x = rng.vec(count(&c.x));
            let w = rng.vec(count(&c.w));
            let loss = |x: &[f64], w: &[f64]| -> Result<f64, Error> {
                let (y, _) = forward(x, &c.x, w, &c.w, &p, layout)?;
                Ok(0.5 * dot(&y, &y))
            };
            let (y, ys) = forward(&x, &c.x, &w, &c.w, &p, layout).map_err(err)?;
            let dx = backward_data(&y, &ys, &w, &c.w, &c.x, &p, layout).map_err(err)?;
            let dw = backward_filter(&x, &c.x, &y, &ys, &c.w, &p, layout).map_err(err)?;
            let h = 1e-6;
            for t in 0..6 {
                let i = (t * 7919 + ci * 13) % x.len();
                let (mut xp, mut xm) = (x.clone(), x.clone());
                xp[i] += h;
                xm[i] -= h;
                let fd = (loss(&xp, &w).map_err(err)? - loss(&xm, &w).map_err(err)?) / (2.0 * h);
                ensure!(
                    within((fd - dx[i]).abs(), 1e-6 * dx[i].abs().max(1.0)),
                    "{} {mode:?} {layout:?}: dx[{i}] = {}, finite difference {fd}",
                    c.name,
                    dx[i]
                );
                let j = (t * 104_729 + ci) % w.len();
                let (mut wp, mut wm) = (w.clone(), w.clone());
                wp[j] += h;
                wm[j] -= h;
                let fd = (loss(&x, &wp).map_err(err)? - loss(&x, &wm).map_err(err)?) / (2.0 * h);
                ensure!(
                    within((fd - dw[j]).abs(), 1e-6 * dw[j].abs().max(1.0)),
                    "{} {mode:?} {layout:?}: dw[{j}] = {}, finite difference {fd}",
                    c.name,
                    dw[j]
                );
            }
        }
    }
    Ok(())
}

fn bias_gradient() -> TestResult {
    let mut rng = Rng(3);
    for shape in [
        vec![3, 4, 5],
        vec![2, 3, 4, 5],
        vec![2, 2, 3, 2, 2],
        vec![1, 1, 1, 1],
    ] {
        let dy = rng.vec(count(&shape));
        let (n, k) = (shape[0], shape[1]);
        let sp: usize = shape[2..].iter().product();
        // Brute force over the channels-first buffer.
        let mut want = vec![0.0; k];
        for b in 0..n {
            for (kk, w) in want.iter_mut().enumerate() {
                for s in 0..sp {
                    *w += dy[(b * k + kk) * sp + s];
                }
            }
        }
        let got = backward_bias(&dy, &shape, CF).map_err(err)?;
        close(&format!("bias {shape:?}"), &got, &want, 1e-14)?;
        let nhwc = convert_layout(&dy, &shape, CF, CL).map_err(err)?;
        let got = backward_bias(&nhwc, &shape, CL).map_err(err)?;
        close(&format!("bias nhwc {shape:?}"), &got, &want, 1e-14)?;
    }

    // Gradient of L = sum(y^2)/2 through the fused bias, by finite differences:
    // dL/db = backward_bias(y).
    let c = &base_cases()[6];
    let x = rng.vec(count(&c.x));
    let w = rng.vec(count(&c.w));
    let k = c.w[0];
    let bias = rng.vec(k);
    let loss = |b: &[f64]| -> Result<(f64, Vec<f64>, Vec<usize>), Error> {
        let f = BiasActivation {
            bias: b,
            ..BiasActivation::default()
        };
        let (y, ys) = bias_activation_forward(&x, &c.x, &w, &c.w, &c.p, CL, &f)?;
        Ok((0.5 * dot(&y, &y), y, ys))
    };
    let (_, y, ys) = loss(&bias).map_err(err)?;
    let db = backward_bias(&y, &ys, CL).map_err(err)?;
    for kk in 0..k {
        let h = 1e-6;
        let (mut bp, mut bm) = (bias.clone(), bias.clone());
        bp[kk] += h;
        bm[kk] -= h;
        let fd = (loss(&bp).map_err(err)?.0 - loss(&bm).map_err(err)?.0) / (2.0 * h);
        ensure!(
            within((fd - db[kk]).abs(), 1e-6 * db[kk].abs().max(1.0)),
            "db[{kk}] = {}, finite difference {fd}",
            db[kk]
        );
    }
    Ok(())
}

/// NHWC results are the NCHW results transposed, for all three directions.
fn layout_consistency() -> TestResult {
    let mut rng = Rng(4);
    for c in all_cases() {
        let y_shape = c.p.output_shape(&c.x, &c.w).map_err(err)?;
        let x = rng.vec(count(&c.x));
        let w = rng.vec(count(&c.w));
        let dy = rng.vec(count(&y_shape));
        let to_cl = |v: &[f64], s: &[usize]| convert_layout(v, s, CF, CL);
        let (xl, wl, dyl) = (
            to_cl(&x, &c.x).map_err(err)?,
            to_cl(&w, &c.w).map_err(err)?,
            to_cl(&dy, &y_shape).map_err(err)?,
        );
        // Round trip is the identity.
        same(
            &format!("{} round trip", c.name),
            &convert_layout(&xl, &c.x, CL, CF).map_err(err)?,
            &x,
        )?;

        let (y, _) = forward(&x, &c.x, &w, &c.w, &c.p, CF).map_err(err)?;
        let (yl, _) = forward(&xl, &c.x, &wl, &c.w, &c.p, CL).map_err(err)?;
        close(
            &format!("{} forward", c.name),
            &yl,
            &to_cl(&y, &y_shape).map_err(err)?,
            1e-13,
        )?;

        let dx = backward_data(&dy, &y_shape, &w, &c.w, &c.x, &c.p, CF).map_err(err)?;
        let dxl = backward_data(&dyl, &y_shape, &wl, &c.w, &c.x, &c.p, CL).map_err(err)?;
        close(
            &format!("{} bwd data", c.name),
            &dxl,
            &to_cl(&dx, &c.x).map_err(err)?,
            1e-13,
        )?;

        let dw = backward_filter(&x, &c.x, &dy, &y_shape, &c.w, &c.p, CF).map_err(err)?;
        let dwl = backward_filter(&xl, &c.x, &dyl, &y_shape, &c.w, &c.p, CL).map_err(err)?;
        close(
            &format!("{} bwd filter", c.name),
            &dwl,
            &to_cl(&dw, &c.w).map_err(err)?,
            1e-13,
        )?;

        let db = backward_bias(&dy, &y_shape, CF).map_err(err)?;
        let dbl = backward_bias(&dyl, &y_shape, CL).map_err(err)?;
        close(&format!("{} bias", c.name), &dbl, &db, 1e-13)?;
    }
    Ok(())
}

/// Convolution mode equals cross-correlation with the spatially flipped
/// filter, in all three directions.
fn mode_is_flip() -> TestResult {
    let mut rng = Rng(5);
    for c in base_cases() {
        let y_shape = c.p.output_shape(&c.x, &c.w).map_err(err)?;
        let x = rng.vec(count(&c.x));
        let w = rng.vec(count(&c.w));
        let dy = rng.vec(count(&y_shape));
        let wf = flip(&w, &c.w);
        let pc = c.p.clone().with_mode(ConvMode::Convolution);
        let (a, _) = forward(&x, &c.x, &w, &c.w, &pc, CF).map_err(err)?;
        let (b, _) = forward(&x, &c.x, &wf, &c.w, &c.p, CF).map_err(err)?;
        close(&format!("{} forward", c.name), &a, &b, 1e-14)?;
        let a = backward_data(&dy, &y_shape, &w, &c.w, &c.x, &pc, CF).map_err(err)?;
        let b = backward_data(&dy, &y_shape, &wf, &c.w, &c.x, &c.p, CF).map_err(err)?;
        close(&format!("{} bwd data", c.name), &a, &b, 1e-14)?;
        let a = backward_filter(&x, &c.x, &dy, &y_shape, &c.w, &pc, CF).map_err(err)?;
        let b = backward_filter(&x, &c.x, &dy, &y_shape, &c.w, &c.p, CF).map_err(err)?;
        close(
            &format!("{} bwd filter", c.name),
            &a,
            &flip(&b, &c.w),
            1e-14,
        )?;
    }
    Ok(())
}

/// A grouped convolution is `groups` independent convolutions on channel slices.
fn groups_are_separate() -> TestResult {
    let mut rng = Rng(6);
    for c in base_cases().into_iter().filter(|c| c.p.groups > 1) {
        let g = c.p.groups;
        let (n, ch, k) = (c.x[0], c.x[1], c.w[0]);
        let (cpg, kpg) = (ch / g, k / g);
        let sp_x: usize = c.x[2..].iter().product();
        let sp_w: usize = c.w[2..].iter().product();
        let y_shape = c.p.output_shape(&c.x, &c.w).map_err(err)?;
        let sp_y: usize = y_shape[2..].iter().product();
        let x = rng.vec(count(&c.x));
        let w = rng.vec(count(&c.w));
        let (y, _) = forward(&x, &c.x, &w, &c.w, &c.p, CF).map_err(err)?;
        let one = c.p.clone().with_groups(1);
        for gi in 0..g {
            let mut xs = vec![n, cpg];
            xs.extend_from_slice(&c.x[2..]);
            let mut ws = vec![kpg, cpg];
            ws.extend_from_slice(&c.w[2..]);
            let xg: Vec<f64> = (0..n)
                .flat_map(|b| {
                    let start = (b * ch + gi * cpg) * sp_x;
                    x[start..start + cpg * sp_x].to_vec()
                })
                .collect();
            let wg = w[gi * kpg * cpg * sp_w..(gi + 1) * kpg * cpg * sp_w].to_vec();
            let (yg, _) = forward(&xg, &xs, &wg, &ws, &one, CF).map_err(err)?;
            let want: Vec<f64> = (0..n)
                .flat_map(|b| {
                    let start = (b * k + gi * kpg) * sp_y;
                    y[start..start + kpg * sp_y].to_vec()
                })
                .collect();
            close(&format!("{} group {gi}", c.name), &yg, &want, 1e-14)?;
        }
    }
    Ok(())
}

fn against_naive_2d() -> TestResult {
    let mut rng = Rng(7);
    let mut n = 0;
    for c in base_cases().into_iter().filter(|c| c.x.len() == 4) {
        let x = rng.vec(count(&c.x));
        let w = rng.vec(count(&c.w));
        let (y, _) = forward(&x, &c.x, &w, &c.w, &c.p, CF).map_err(err)?;
        close(&c.name, &y, &naive_2d(&x, &c.x, &w, &c.w, &c.p), 1e-14)?;
        n += 1;
    }
    ensure!(n == 7, "compared {n} cases");
    Ok(())
}

fn output_shapes() -> TestResult {
    // out = (in + 2*pad - dilation*(k-1) - 1)/stride + 1:
    // (224 + 6 - 1*6 - 1)/2 + 1 = 223/2 + 1 = 112.
    let p = ConvParams::new(2).with_pad(&[3, 3]).with_stride(&[2, 2]);
    let s = p
        .output_shape(&[8, 3, 224, 224], &[64, 3, 7, 7])
        .map_err(err)?;
    ensure!(s == [8, 64, 112, 112], "{s:?}");
    // (10 + 0 - 2*2 - 1)/3 + 1 = 5/3 + 1 = 2;  (5 + 2 - 1*0 - 1)/1 + 1 = 7.
    let p = ConvParams::new(2)
        .with_pad(&[0, 1])
        .with_stride(&[3, 1])
        .with_dilation(&[2, 1]);
    let s = p.output_shape(&[1, 4, 10, 5], &[2, 2, 3, 1]);
    // 4 input channels but w has 2 and groups 1: a mismatch.
    ensure!(s.is_err(), "{s:?}");
    let s = p
        .with_groups(2)
        .output_shape(&[1, 4, 10, 5], &[2, 2, 3, 1])
        .map_err(err)?;
    ensure!(s == [1, 2, 2, 7], "{s:?}");
    // Layout strides: NCHW [2, 3, 4, 5] -> [60, 20, 5, 1]; NHWC -> n 60, c 1, h 15, w 3.
    let s = CF.strides(&[2, 3, 4, 5]).map_err(err)?;
    ensure!(s == [60, 20, 5, 1], "{s:?}");
    let s = CL.strides(&[2, 3, 4, 5]).map_err(err)?;
    ensure!(s == [60, 1, 15, 3], "{s:?}");
    ensure!(
        Layout::from(cudnn::dnn::TensorFormat::Nhwc) == CL,
        "TensorFormat::Nhwc"
    );
    Ok(())
}

fn expect_err(what: &str, r: Result<impl std::fmt::Debug, Error>, needle: &str) -> TestResult {
    match r {
        Ok(v) => Err(format!("{what}: accepted, gave {v:?}").into()),
        Err(e) => {
            let text = e.to_string();
            ensure!(
                text.contains(needle),
                "{what}: error `{text}` does not mention `{needle}`"
            );
            ensure!(
                matches!(e, Error::InvalidArgument { .. } | Error::Mismatch { .. }),
                "{what}: unexpected kind {e:?}"
            );
            Ok(())
        }
    }
}

fn validation() -> TestResult {
    let p1 = ConvParams::new(1);
    let x = [0.0; 8];
    let w = [0.0; 3];
    let f = |x: &[f64], xs: &[usize], w: &[f64], ws: &[usize], p: &ConvParams| {
        forward(x, xs, w, ws, p, CF)
    };
    // (what, x, x_shape, w, w_shape, params, what the error names)
    type Case<'a> = (
        &'a str,
        &'a [f64],
        &'a [usize],
        &'a [f64],
        &'a [usize],
        ConvParams,
        &'a str,
    );
    let (x8, w3): (&[usize], &[usize]) = (&[1, 1, 8], &[1, 1, 3]);
    let cases: [Case<'_>; 17] = [
        (
            "x too short",
            &x[..7],
            x8,
            &w,
            w3,
            p1.clone(),
            "x buffer length",
        ),
        (
            "w too long",
            &x,
            &[1, 1, 8],
            &[0.0; 4],
            &[1, 1, 3],
            p1.clone(),
            "w buffer length",
        ),
        ("rank 2", &x, &[1, 8], &w, &[1, 3], p1.clone(), "x_shape"),
        (
            "rank mismatch",
            &x,
            &[1, 1, 8],
            &w,
            &[1, 1, 3, 1],
            p1.clone(),
            "w_shape rank",
        ),
        (
            "zero dim",
            &[],
            &[1, 0, 8],
            &w,
            &[1, 1, 3],
            p1.clone(),
            "x_shape[1]",
        ),
        (
            "pad length",
            &x,
            x8,
            &w,
            w3,
            ConvParams::new(2),
            "pad length",
        ),
        (
            "stride 0",
            &x,
            x8,
            &w,
            w3,
            p1.clone().with_stride(&[0]),
            "stride[0]",
        ),
        (
            "dilation 0",
            &x,
            x8,
            &w,
            w3,
            p1.clone().with_dilation(&[0]),
            "dilation[0]",
        ),
        (
            "groups 0",
            &x,
            x8,
            &w,
            w3,
            p1.clone().with_groups(0),
            "groups",
        ),
        (
            "groups not dividing c",
            &[0.0; 24],
            &[1, 3, 8],
            &[0.0; 6],
            &[2, 1, 3],
            p1.clone().with_groups(2),
            "input channels",
        ),
        (
            "groups not dividing k",
            &[0.0; 16],
            &[1, 2, 8],
            &[0.0; 9],
            &[3, 1, 3],
            p1.clone().with_groups(2),
            "output channels",
        ),
        (
            "channel mismatch",
            &[0.0; 16],
            &[1, 2, 8],
            &w,
            &[1, 1, 3],
            p1.clone(),
            "w_shape[1]",
        ),
        (
            "window too large",
            &x[..2],
            &[1, 1, 2],
            &w,
            &[1, 1, 3],
            p1.clone(),
            "output is empty",
        ),
        (
            "dilated window too large",
            &x[..4],
            &[1, 1, 4],
            &w,
            &[1, 1, 3],
            p1.clone().with_dilation(&[2]),
            "output is empty",
        ),
        (
            "huge pad",
            &x,
            x8,
            &w,
            w3,
            p1.clone().with_pad(&[usize::MAX / 2]),
            "pad[0]",
        ),
        (
            "huge stride",
            &x,
            x8,
            &w,
            w3,
            p1.clone().with_stride(&[usize::MAX]),
            "stride[0]",
        ),
        (
            "overflowing shape",
            &x,
            &[usize::MAX, 4, 8],
            &w,
            &[1, 4, 3],
            p1.clone(),
            "element count",
        ),
    ];
    for (what, xb, xs, wb, ws, p, needle) in cases {
        expect_err(what, f(xb, xs, wb, ws, &p), needle)?;
    }
    // Backward: dy shape must be the forward output shape; lengths checked.
    let bd = |dy: &[f64], ds: &[usize]| backward_data(dy, ds, &w, &[1, 1, 3], &[1, 1, 8], &p1, CF);
    expect_err("bwd data dy shape", bd(&[0.0; 5], &[1, 1, 5]), "dy_shape")?;
    expect_err(
        "bwd data dy length",
        bd(&[0.0; 5], &[1, 1, 6]),
        "dy buffer length",
    )?;
    let bf = |xb: &[f64], dy: &[f64], ds: &[usize]| {
        backward_filter(xb, &[1, 1, 8], dy, ds, &[1, 1, 3], &p1, CF)
    };
    expect_err(
        "bwd filter dy shape",
        bf(&x, &[0.0; 6], &[1, 2, 6]),
        "dy_shape",
    )?;
    expect_err(
        "bwd filter x length",
        bf(&x[..1], &[0.0; 6], &[1, 1, 6]),
        "x buffer length",
    )?;
    expect_err(
        "bias rank",
        backward_bias(&[0.0; 2], &[1, 2], CF),
        "dy_shape",
    )?;
    expect_err(
        "bias length",
        backward_bias(&[0.0; 3], &[1, 2, 2], CF),
        "dy buffer length",
    )?;
    // Fused: bias count, z length, activation coefficient.
    let fz = |fused: &BiasActivation<'_>| {
        bias_activation_forward(&x, &[1, 1, 8], &w, &[1, 1, 3], &p1, CF, fused)
    };
    expect_err(
        "fused bias",
        fz(&BiasActivation::default()),
        "bias buffer length",
    )?;
    let z = [0.0; 5];
    expect_err(
        "fused z",
        fz(&BiasActivation {
            bias: &[0.0],
            z: Some(&z),
            ..BiasActivation::default()
        }),
        "z buffer length",
    )?;
    expect_err(
        "fused coefficient",
        fz(&BiasActivation {
            bias: &[0.0],
            activation: ActivationMode::Elu { alpha: f64::NAN },
            ..BiasActivation::default()
        }),
        "alpha",
    )?;
    expect_err(
        "convert length",
        convert_layout(&[0.0; 3], &[1, 2, 2], CF, CL),
        "data buffer length",
    )?;
    expect_err("strides rank", CL.strides(&[3]), "shape")?;
    // The module is reachable under its documented path.
    let _ = conv::ConvParams::new(1);
    Ok(())
}

pub fn main() {
    run(vec![
        unit("conv_ref::hand_forward", hand_forward),
        unit("conv_ref::hand_nhwc", hand_nhwc),
        unit("conv_ref::hand_backward", hand_backward),
        unit("conv_ref::hand_bias", hand_bias),
        unit("conv_ref::hand_fused", hand_fused),
        unit("conv_ref::output_shapes", output_shapes),
        unit("conv_ref::adjoint_identities", adjoint),
        unit("conv_ref::finite_differences", finite_differences),
        unit("conv_ref::bias_gradient", bias_gradient),
        unit("conv_ref::layout_consistency", layout_consistency),
        unit("conv_ref::convolution_mode_is_flipped_filter", mode_is_flip),
        unit(
            "conv_ref::groups_are_separate_convolutions",
            groups_are_separate,
        ),
        unit("conv_ref::against_naive_2d", against_naive_2d),
        unit("conv_ref::validation", validation),
    ])
}
