//! Where a plan will run: a live device, or a GPU described by its properties
//! (cuDNN's device-properties JSON), so plans can be built on a machine with
//! no GPU for one that has it.

use std::cell::RefCell;
use std::fmt;
use std::rc::Rc;

use super::backend::{Descriptor, attr, kind};
use crate::error::{Error, Result};

/// The fields cuDNN requires in a device-properties JSON (a missing one is
/// `BAD_PARAM`), in the order [`DeviceSpec::to_json`] writes them.
pub const REQUIRED_FIELDS: [&str; 24] = [
    "maxGridSize",
    "maxBlockSize",
    "regsPerBlock",
    "multiProcessorCount",
    "warpSize",
    "maxSharedMemoryPerBlock",
    "maxSharedMemoryPerBlockOptin",
    "reservedSharedMemoryPerBlock",
    "maxRegistersPerSM",
    "maxCtasPerSM",
    "maxThreadsPerBlock",
    "maxThreadsPerSM",
    "pciDeviceId",
    "isTccDriver",
    "supportCoopLaunch",
    "totalGlobalMem",
    "smClockRateKHz",
    "memClockRateKHz",
    "memoryBusWidth",
    "l2CacheSize",
    "cudaDeviceId",
    "deviceVer",
    "driverVer",
    "deviceName",
];

/// Required fields a live device's JSON may lack: cuDNN 9.19 writes no
/// `memoryBusWidth` for a device (seen on an H100, 2026-12-05, the first
/// device run), though a JSON given to cuDNN 9.28 needs one.
/// [`DeviceProperties::from_device`] takes what the loaded cuDNN gave.
const MAY_LACK_ON_A_DEVICE: [&str; 1] = ["memoryBusWidth"];

/// Keys cuDNN 9.28 adds to a plan's device profile (`GPUProfile`) beyond
/// [`REQUIRED_FIELDS`].
pub(crate) const EXTRA_PROFILE_FIELDS: [&str; 2] =
    ["smCountOrigin", "oversizedSharedMemoryPerBlock"];

/// Longest `deviceName` accepted (bytes).
pub(crate) const MAX_DEVICE_NAME: usize = 256;

/// Why one device-properties value is out of range: `at` is the place in
/// the value (`""`, or `"/i"` for an array entry), `rule` what it must be.
pub(crate) struct PropertyFault {
    pub at: String,
    pub rule: String,
    pub got: String,
}

/// The one range check of a device-properties key, shared by
/// [`DeviceProperties::from_json`] (a target) and the plan JSON loader's
/// device profile (`plan_json::engine::profile`), so that a target that
/// plans also reloads its plans: `deviceName` a non-empty string of at most
/// [`MAX_DEVICE_NAME`] bytes; `maxGridSize` / `maxBlockSize` 3 integers in
/// `1..=i32::MAX`; `totalGlobalMem` in `1..=i64::MAX`; the ids, flags,
/// reserved and oversized shared memory and `smCountOrigin` in
/// `0..=i32::MAX`; every other known key in `1..=i32::MAX`. `None` for a
/// key that is no device property (the caller decides).
pub(crate) fn property_fault(
    key: &str,
    val: &serde_json::Value,
) -> Option<Result<(), PropertyFault>> {
    let fault = |at: String, rule: String, got: &serde_json::Value| {
        let mut g = got.to_string();
        if g.len() > 80 {
            let mut end = 80;
            while !g.is_char_boundary(end) {
                end -= 1;
            }
            g = format!("{}... ({} bytes)", &g[..end], g.len());
        }
        Err(PropertyFault { at, rule, got: g })
    };
    if !REQUIRED_FIELDS.contains(&key) && !EXTRA_PROFILE_FIELDS.contains(&key) {
        return None;
    }
    let (lo, hi) = match key {
        "deviceName" => {
            return Some(match val.as_str() {
                Some(n) if !n.is_empty() && n.len() <= MAX_DEVICE_NAME => Ok(()),
                _ => fault(
                    String::new(),
                    format!("must be a non-empty string of at most {MAX_DEVICE_NAME} bytes"),
                    val,
                ),
            });
        }
        "totalGlobalMem" => (1, i64::MAX),
        "pciDeviceId"
        | "isTccDriver"
        | "cudaDeviceId"
        | "reservedSharedMemoryPerBlock"
        | "supportCoopLaunch"
        | "smCountOrigin"
        | "oversizedSharedMemoryPerBlock" => (0, i64::from(i32::MAX)),
        _ => (1, i64::from(i32::MAX)),
    };
    let rule = || format!("must be an integer in {lo}..={hi}");
    if matches!(key, "maxGridSize" | "maxBlockSize") {
        let Some(a) = val.as_array().filter(|a| a.len() == 3) else {
            return Some(fault(
                String::new(),
                format!("must be an array of 3 integers in {lo}..={hi}"),
                val,
            ));
        };
        for (i, x) in a.iter().enumerate() {
            if !x.as_i64().is_some_and(|n| (lo..=hi).contains(&n)) {
                return Some(fault(format!("/{i}"), rule(), x));
            }
        }
        return Some(Ok(()));
    }
    Some(if val.as_i64().is_some_and(|n| (lo..=hi).contains(&n)) {
        Ok(())
    } else {
        fault(String::new(), rule(), val)
    })
}

/// A GPU's properties as typed values; [`to_json`](Self::to_json) gives the
/// JSON cuDNN reads. Presets: [`h100`](Self::h100), [`h200`](Self::h200),
/// [`a100`](Self::a100), [`l4`](Self::l4), [`b200`](Self::b200) (values from
/// public specification sheets, not from a device).
#[derive(Clone, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
#[non_exhaustive]
pub struct DeviceSpec {
    pub name: String,
    /// Compute capability major, minor (`deviceVer` = major*100 + minor*10).
    pub compute_capability: (u32, u32),
    pub multiprocessor_count: u32,
    pub max_grid_size: [i64; 3],
    pub max_block_size: [i64; 3],
    pub regs_per_block: i64,
    pub warp_size: i64,
    pub max_shared_memory_per_block: i64,
    pub max_shared_memory_per_block_optin: i64,
    pub reserved_shared_memory_per_block: i64,
    pub max_registers_per_sm: i64,
    pub max_ctas_per_sm: i64,
    pub max_threads_per_block: i64,
    pub max_threads_per_sm: i64,
    pub total_global_mem: i64,
    pub sm_clock_khz: i64,
    pub mem_clock_khz: i64,
    pub memory_bus_width: i64,
    pub l2_cache_size: i64,
    /// Driver version as CUDA encodes it (13000 = 13.0).
    pub driver_version: i64,
}

impl DeviceSpec {
    fn hopper(name: &str, sms: u32, mem: i64, mem_clock: i64, bus: i64) -> Self {
        Self {
            name: name.to_string(),
            compute_capability: (9, 0),
            multiprocessor_count: sms,
            max_grid_size: [2147483647, 65535, 65535],
            max_block_size: [1024, 1024, 64],
            regs_per_block: 65536,
            warp_size: 32,
            max_shared_memory_per_block: 49152,
            max_shared_memory_per_block_optin: 232448,
            reserved_shared_memory_per_block: 1024,
            max_registers_per_sm: 65536,
            max_ctas_per_sm: 32,
            max_threads_per_block: 1024,
            max_threads_per_sm: 2048,
            total_global_mem: mem,
            sm_clock_khz: 1980000,
            mem_clock_khz: mem_clock,
            memory_bus_width: bus,
            l2_cache_size: 52428800,
            driver_version: 13000,
        }
    }

    /// NVIDIA H100 SXM (sm_90, 132 SMs, 80 GB).
    pub fn h100() -> Self {
        Self::hopper("NVIDIA H100 80GB HBM3", 132, 85029158912, 2619000, 5120)
    }

    /// NVIDIA H200 (sm_90, 132 SMs, 141 GB).
    pub fn h200() -> Self {
        Self::hopper("NVIDIA H200", 132, 150754820096, 3201000, 6144)
    }

    /// NVIDIA A100 SXM 80 GB (sm_80, 108 SMs).
    pub fn a100() -> Self {
        Self {
            name: "NVIDIA A100-SXM4-80GB".to_string(),
            compute_capability: (8, 0),
            multiprocessor_count: 108,
            max_shared_memory_per_block_optin: 166912,
            max_ctas_per_sm: 32,
            total_global_mem: 85094825984,
            sm_clock_khz: 1410000,
            mem_clock_khz: 1593000,
            memory_bus_width: 5120,
            l2_cache_size: 41943040,
            ..Self::hopper("", 0, 0, 0, 0)
        }
    }

    /// NVIDIA L4 (sm_89, 58 SMs, 24 GB).
    pub fn l4() -> Self {
        Self {
            name: "NVIDIA L4".to_string(),
            compute_capability: (8, 9),
            multiprocessor_count: 58,
            max_shared_memory_per_block_optin: 101376,
            max_ctas_per_sm: 24,
            max_threads_per_sm: 1536,
            total_global_mem: 23580639232,
            sm_clock_khz: 2040000,
            mem_clock_khz: 6251000,
            memory_bus_width: 192,
            l2_cache_size: 50331648,
            ..Self::hopper("", 0, 0, 0, 0)
        }
    }

    /// NVIDIA B200 (sm_100, 148 SMs, 180 GB).
    pub fn b200() -> Self {
        Self {
            name: "NVIDIA B200".to_string(),
            compute_capability: (10, 0),
            multiprocessor_count: 148,
            max_shared_memory_per_block_optin: 232448,
            total_global_mem: 191514329088,
            sm_clock_khz: 1965000,
            mem_clock_khz: 3996000,
            memory_bus_width: 8192,
            l2_cache_size: 133169152,
            ..Self::hopper("", 0, 0, 0, 0)
        }
    }

    /// A preset by a short name: `h100`, `h200`, `a100`, `l4`, `b200`.
    pub fn preset(name: &str) -> Option<Self> {
        match name.to_ascii_lowercase().as_str() {
            "h100" => Some(Self::h100()),
            "h200" => Some(Self::h200()),
            "a100" => Some(Self::a100()),
            "l4" => Some(Self::l4()),
            "b200" => Some(Self::b200()),
            _ => None,
        }
    }

    /// `deviceVer` as cuDNN encodes it: major*100 + minor*10 (H200: 900).
    pub fn device_ver(&self) -> i64 {
        i64::from(self.compute_capability.0) * 100 + i64::from(self.compute_capability.1) * 10
    }

    /// The JSON cuDNN's device-properties descriptor reads.
    pub fn to_json(&self) -> String {
        let g = self.max_grid_size;
        let b = self.max_block_size;
        let name = serde_json::Value::String(self.name.clone()).to_string();
        format!(
            "{{\"maxGridSize\": [{}, {}, {}], \"maxBlockSize\": [{}, {}, {}], \"regsPerBlock\": {}, \
             \"multiProcessorCount\": {}, \"warpSize\": {}, \"maxSharedMemoryPerBlock\": {}, \
             \"maxSharedMemoryPerBlockOptin\": {}, \"reservedSharedMemoryPerBlock\": {}, \
             \"maxRegistersPerSM\": {}, \"maxCtasPerSM\": {}, \"maxThreadsPerBlock\": {}, \
             \"maxThreadsPerSM\": {}, \"pciDeviceId\": 0, \"isTccDriver\": 0, \"supportCoopLaunch\": 1, \
             \"totalGlobalMem\": {}, \"smClockRateKHz\": {}, \"memClockRateKHz\": {}, \
             \"memoryBusWidth\": {}, \"l2CacheSize\": {}, \"cudaDeviceId\": 0, \"deviceVer\": {}, \
             \"driverVer\": {}, \"deviceName\": {}}}",
            g[0],
            g[1],
            g[2],
            b[0],
            b[1],
            b[2],
            self.regs_per_block,
            self.multiprocessor_count,
            self.warp_size,
            self.max_shared_memory_per_block,
            self.max_shared_memory_per_block_optin,
            self.reserved_shared_memory_per_block,
            self.max_registers_per_sm,
            self.max_ctas_per_sm,
            self.max_threads_per_block,
            self.max_threads_per_sm,
            self.total_global_mem,
            self.sm_clock_khz,
            self.mem_clock_khz,
            self.memory_bus_width,
            self.l2_cache_size,
            self.device_ver(),
            self.driver_version,
            name,
        )
    }
}

/// A GPU's properties in cuDNN's JSON form, checked.
#[derive(Clone, PartialEq, Eq)]
pub struct DeviceProperties {
    json: String,
    name: String,
    device_ver: i64,
    sm_count: i64,
}

/// How many device-properties descriptors a thread keeps (one per target
/// it plans for; the oldest goes first).
const DEVICE_PROPS_KEPT: usize = 4;

/// A kept device-properties descriptor and the JSON it was made from.
type KeptProps = (Box<str>, Rc<Descriptor<kind::DeviceProp>>);

thread_local! {
    /// `(JSON, descriptor)` of the device properties this thread planned
    /// with last ([`DeviceProperties::descriptor`]).
    static DEVICE_PROPS: RefCell<Vec<KeptProps>> = const { RefCell::new(Vec::new()) };
}

impl fmt::Debug for DeviceProperties {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceProperties")
            .field("name", &self.name)
            .field("device_ver", &self.device_ver)
            .field("sm_count", &self.sm_count)
            .finish()
    }
}

impl DeviceProperties {
    /// Parse and check a device-properties JSON (as captured from a device, or
    /// hand-written): every field cuDNN requires, `deviceVer` in cuDNN's
    /// encoding (major*100 + minor*10, at least 500 and below 10000).
    ///
    /// # Errors
    /// Not JSON, not an object, a required field missing or of the wrong type,
    /// or a `deviceVer` cuDNN would refuse or misread.
    pub fn from_json(json: &str) -> Result<Self> {
        Self::parse(json, &[])
    }

    /// [`from_json`](Self::from_json), where the required fields in
    /// `may_lack` may be absent.
    fn parse(json: &str, may_lack: &[&str]) -> Result<Self> {
        let v: serde_json::Value = serde_json::from_str(json).map_err(|e| {
            Error::invalid(
                "device properties JSON",
                format!("must be JSON ({e})"),
                short(json),
            )
        })?;
        let obj = v.as_object().ok_or_else(|| {
            Error::invalid(
                "device properties JSON",
                "must be a JSON object",
                short(json),
            )
        })?;
        super::plan_json::no_duplicate_keys(json)?;
        for field in REQUIRED_FIELDS.iter() {
            if !obj.contains_key(*field) && !may_lack.contains(field) {
                return Err(Error::invalid(
                    format!("device properties JSON field `{field}`"),
                    "is required by cuDNN",
                    "missing",
                ));
            }
        }
        // Every known key in the range the plan JSON loader holds a plan's
        // `GPUProfile` to (the same function), so a target that plans also
        // reloads its plans (issue 31: a negative reserved shared memory
        // planned and was refused on reload). Keys this crate does not know
        // (a newer cuDNN's) pass: cuDNN reads its own.
        for (field, val) in obj {
            if let Some(Err(f)) = property_fault(field, val) {
                return Err(Error::invalid(
                    format!("device properties JSON field `{field}{}`", f.at),
                    f.rule,
                    f.got,
                ));
            }
        }
        let device_ver = obj.get("deviceVer").and_then(|x| x.as_i64()).unwrap_or(0);
        if !(500..2_000).contains(&device_ver) || device_ver % 10 != 0 {
            return Err(Error::invalid(
                "device properties JSON field `deviceVer`",
                "must be major*100 + minor*10 (H200: 900, A100: 800, B200: 1000)",
                device_ver,
            ));
        }
        let name = obj
            .get("deviceName")
            .and_then(|x| x.as_str())
            .unwrap_or_default()
            .to_string();
        let sm_count = obj
            .get("multiProcessorCount")
            .and_then(|x| x.as_i64())
            .unwrap_or(0);
        if sm_count <= 0 {
            return Err(Error::invalid(
                "device properties JSON field `multiProcessorCount`",
                "must be >= 1",
                sm_count,
            ));
        }
        Ok(Self {
            json: json.to_string(),
            name,
            device_ver,
            sm_count,
        })
    }

    /// The properties of a typed spec.
    pub fn from_spec(spec: &DeviceSpec) -> Result<Self> {
        Self::from_json(&spec.to_json())
    }

    /// The properties of a live device, as cuDNN reads them (`CUDNN_ATTR_DEVICEPROP_DEVICE_ID`).
    ///
    /// # Errors
    /// [`Error::NoDevice`] when there is no usable device (cuDNN's own
    /// status kept in its detail); [`Error::InvalidArgument`] naming the
    /// ordinal and the device count when there is no such device;
    /// [`Error::Unsupported`] with a cuDNN older than 9.8.
    pub fn from_device(ordinal: i32) -> Result<Self> {
        super::require_graph_support()?;
        // cuDNN answers NOT_INITIALIZED both without a device and for an
        // ordinal past the last one: the runtime is asked first.
        match crate::runtime::Device::count() {
            Ok(0) => return Err(crate::no_device::zero_devices()),
            Ok(n) if usize::try_from(ordinal).map_or(true, |o| o >= n) => {
                return Err(Error::invalid(
                    "ordinal",
                    format!("must name a CUDA device, 0..={} here", n - 1),
                    ordinal,
                ));
            }
            Err(e) if e.is_no_device() => return Err(e),
            // A runtime that cannot be asked: cuDNN is, and its answer explained.
            _ => {}
        }
        let props = || -> Result<Self> {
            let mut d = Descriptor::<kind::DeviceProp>::new()?;
            d.set(attr::DEVICEPROP_DEVICE_ID, &[ordinal])?;
            d.finalize()?;
            let json = read_json(&d)?;
            Self::parse(&json, &MAY_LACK_ON_A_DEVICE)
        };
        props().map_err(crate::no_device::explain)
    }

    /// The JSON cuDNN reads.
    pub fn json(&self) -> &str {
        &self.json
    }
    /// `deviceName`.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// `deviceVer` (major*100 + minor*10).
    pub fn device_ver(&self) -> i64 {
        self.device_ver
    }
    /// `multiProcessorCount`.
    pub fn sm_count(&self) -> i64 {
        self.sm_count
    }

    /// A short stable identity for cache keys: name, architecture and SM count.
    pub fn fingerprint(&self) -> String {
        format!(
            "{}|sm{}|{}sms",
            self.name,
            self.device_ver / 10,
            self.sm_count
        )
    }

    /// Whether a plan made for `fingerprint` is for this GPU: the same
    /// architecture and SM count (the name may differ between a preset and
    /// what a driver reports).
    pub fn compatible(&self, fingerprint: &str) -> bool {
        let arch = self.arch_key();
        fingerprint == arch || fingerprint.ends_with(&format!("|{arch}"))
    }

    /// Architecture and SM count (`sm90|132sms`): what plan compatibility and cache keys use.
    pub fn arch_key(&self) -> String {
        format!("sm{}|{}sms", self.device_ver / 10, self.sm_count)
    }

    /// A finalized cuDNN device-properties descriptor of these properties.
    ///
    /// cuDNN parses the JSON at every finalize of such a descriptor, and
    /// heuristics, every plan finalize and every plan load take one: the
    /// last few made on this thread are kept (per thread: a descriptor is
    /// not `Sync`) and handed out again for the same JSON, as NVIDIA's
    /// frontend shares one device-properties object between its graphs. A
    /// finalized descriptor is only read when it is set on another.
    pub(crate) fn descriptor(&self) -> Result<Rc<Descriptor<kind::DeviceProp>>> {
        super::require_graph_support()?;
        // `try_with`: in a thread's exit (another thread-local's destructor
        // planning), the cache may be gone; plan without it then.
        let cached = DEVICE_PROPS
            .try_with(|c| {
                c.try_borrow().ok().and_then(|c| {
                    c.iter()
                        .find(|(j, _)| **j == *self.json)
                        .map(|(_, d)| d.clone())
                })
            })
            .ok()
            .flatten();
        if let Some(d) = cached {
            return Ok(d);
        }
        let mut d = Descriptor::<kind::DeviceProp>::new()?;
        let mut bytes = self.json.as_bytes().to_vec();
        bytes.push(0);
        d.set(attr::DEVICEPROP_JSON_REPRESENTATION, &bytes)?;
        d.finalize()?;
        let d = Rc::new(d);
        let _ = DEVICE_PROPS.try_with(|c| {
            if let Ok(mut c) = c.try_borrow_mut() {
                if c.len() >= DEVICE_PROPS_KEPT {
                    c.remove(0);
                }
                c.push((self.json.as_str().into(), d.clone()));
            }
        });
        Ok(d)
    }
}

fn short(s: &str) -> String {
    let t: String = s.chars().take(60).collect();
    if t.len() < s.len() {
        format!("{t:?}...")
    } else {
        format!("{t:?}")
    }
}

pub(crate) fn read_json<K: JsonAttr>(d: &Descriptor<K>) -> Result<String> {
    let a = K::json_attr();
    // A read with no room reports the length (including the NUL).
    let n = d.count(a)?;
    if n > 64 << 20 {
        return Err(Error::invalid(a.label(), "JSON larger than 64 MiB", n));
    }
    let mut buf = vec![0u8; n.max(1)];
    let got = d.get(a, &mut buf)?;
    let got = got.min(buf.len());
    let end = buf[..got].iter().position(|&c| c == 0).unwrap_or(got);
    buf.truncate(end);
    String::from_utf8(buf)
        .map_err(|e| Error::invalid(a.label(), "cuDNN returned non-UTF-8 JSON", e))
}

/// Descriptor kinds with a JSON representation.
pub(crate) trait JsonAttr: super::backend::Kind + Sized {
    fn json_attr() -> super::backend::Attr<Self, super::backend::value::Char>;
}
impl JsonAttr for kind::DeviceProp {
    fn json_attr() -> super::backend::Attr<Self, super::backend::value::Char> {
        attr::DEVICEPROP_JSON_REPRESENTATION
    }
}
impl JsonAttr for kind::ExecutionPlan {
    fn json_attr() -> super::backend::Attr<Self, super::backend::value::Char> {
        attr::EXECUTION_PLAN_JSON_REPRESENTATION
    }
}

/// Where plans are built for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// A live device (its properties read from it).
    Device {
        /// The CUDA ordinal.
        ordinal: i32,
        /// Its properties, read once.
        properties: DeviceProperties,
    },
    /// A GPU described by properties; no device needed.
    Properties(DeviceProperties),
}

impl Target {
    /// A live device.
    ///
    /// # Errors
    /// As [`DeviceProperties::from_device`]: [`Error::NoDevice`] without a
    /// usable device, [`Error::InvalidArgument`] for no such device, or
    /// cuDNN < 9.8.
    pub fn device(ordinal: i32) -> Result<Self> {
        Ok(Target::Device {
            ordinal,
            properties: DeviceProperties::from_device(ordinal)?,
        })
    }

    /// A GPU described by a typed spec (e.g. [`DeviceSpec::h200`]).
    ///
    /// # Errors
    /// The spec does not make valid properties.
    pub fn spec(spec: &DeviceSpec) -> Result<Self> {
        Ok(Target::Properties(DeviceProperties::from_spec(spec)?))
    }

    /// A preset by short name (`h100`, `h200`, `a100`, `l4`, `b200`).
    ///
    /// # Errors
    /// Unknown name (the message lists the presets).
    pub fn preset(name: &str) -> Result<Self> {
        let spec = DeviceSpec::preset(name).ok_or_else(|| {
            Error::invalid("target", "must be one of h100, h200, a100, l4, b200", name)
        })?;
        Self::spec(&spec)
    }

    /// A GPU described by its device-properties JSON.
    ///
    /// # Errors
    /// As [`DeviceProperties::from_json`].
    pub fn json(json: &str) -> Result<Self> {
        Ok(Target::Properties(DeviceProperties::from_json(json)?))
    }

    /// The properties plans are built with.
    pub fn properties(&self) -> &DeviceProperties {
        match self {
            Target::Device { properties, .. } | Target::Properties(properties) => properties,
        }
    }

    /// The identity used in cache keys and plan files.
    pub fn fingerprint(&self) -> String {
        self.properties().fingerprint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn h200() -> serde_json::Map<String, Value> {
        match serde_json::from_str(&DeviceSpec::h200().to_json()) {
            Ok(Value::Object(m)) => m,
            other => panic!("{other:?}"),
        }
    }

    fn with(key: &str, val: Value) -> String {
        let mut m = h200();
        m.insert(key.to_string(), val);
        Value::Object(m).to_string()
    }

    fn refused(json: &str, field: &str) {
        match DeviceProperties::from_json(json) {
            Err(e @ Error::InvalidArgument { .. }) => {
                assert!(e.to_string().contains(field), "{field}: {e}")
            }
            other => panic!("{field}: {other:?}"),
        }
    }

    /// The H100's own JSON from cuDNN 9.19 (first device run, 2026-12-05)
    /// has no `memoryBusWidth`: the live-device path takes it, a JSON given
    /// by the user still needs it (cuDNN 9.28 refuses one without it), and
    /// every other required field is required on both paths.
    #[test]
    fn a_device_json_may_lack_only_the_bus_width() {
        let device = r#"{"maxGridSize":[2147483647,65535,65535],"maxBlockSize":[1024,1024,64],"regsPerBlock":65536,"multiProcessorCount":132,"warpSize":32,"maxSharedMemoryPerBlock":49152,"maxSharedMemoryPerBlockOptin":232448,"reservedSharedMemoryPerBlock":1024,"maxRegistersPerSM":65536,"maxCtasPerSM":32,"maxThreadsPerBlock":1024,"maxThreadsPerSM":2048,"pciDeviceId":6,"isTccDriver":0,"supportCoopLaunch":1,"totalGlobalMem":85017493504,"smClockRateKHz":1980000,"memClockRateKHz":2619000,"l2CacheSize":52428800,"cudaDeviceId":0,"deviceVer":900,"driverVer":13000,"deviceName":"NVIDIA H100 80GB HBM3"}"#;
        let p = DeviceProperties::parse(device, &MAY_LACK_ON_A_DEVICE).unwrap();
        assert_eq!((p.device_ver(), p.sm_count()), (900, 132));
        refused(device, "memoryBusWidth");
        let mut m = h200();
        for k in REQUIRED_FIELDS {
            let mut less = m.clone();
            less.remove(k);
            let json = Value::Object(less).to_string();
            let live = DeviceProperties::parse(&json, &MAY_LACK_ON_A_DEVICE);
            assert_eq!(live.is_ok(), k == "memoryBusWidth", "{k}");
        }
        m.remove("memoryBusWidth");
        refused(&Value::Object(m).to_string(), "memoryBusWidth");
    }

    /// A target's properties are held to the plan loader's ranges (one
    /// function), every key: the cases the review found and each bound.
    #[test]
    fn properties_ranges_every_key() {
        assert!(DeviceProperties::from_json(&with("deviceName", json!("x"))).is_ok());
        refused(&with("deviceName", json!("")), "deviceName");
        let long = "n".repeat(MAX_DEVICE_NAME + 1);
        refused(&with("deviceName", json!(long)), "deviceName");
        assert!(DeviceProperties::from_json(&with("deviceName", json!("n".repeat(256)))).is_ok());
        for k in EXTRA_PROFILE_FIELDS {
            assert!(
                DeviceProperties::from_json(&with(k, json!(0))).is_ok(),
                "{k}"
            );
            refused(&with(k, json!(-1)), k);
            refused(&with(k, json!(i64::from(i32::MAX) + 1)), k);
            refused(&with(k, json!("1")), k);
        }
        for k in REQUIRED_FIELDS {
            match k {
                "deviceName" => {}
                "maxGridSize" | "maxBlockSize" => {
                    refused(&with(k, json!([1, 0, 1])), &format!("{k}/1"));
                    refused(&with(k, json!([1, 1])), k);
                }
                "totalGlobalMem" => {
                    refused(&with(k, json!(0)), k);
                    assert!(DeviceProperties::from_json(&with(k, json!(i64::MAX))).is_ok());
                }
                _ => {
                    let zero_ok = matches!(
                        k,
                        "pciDeviceId"
                            | "isTccDriver"
                            | "cudaDeviceId"
                            | "reservedSharedMemoryPerBlock"
                            | "supportCoopLaunch"
                    );
                    refused(&with(k, json!(-1)), k);
                    refused(&with(k, json!(i64::from(i32::MAX) + 1)), k);
                    if !zero_ok {
                        refused(&with(k, json!(0)), k);
                    }
                }
            }
        }
        // Duplicate keys: refused (which one cuDNN reads is not ours to guess).
        let j = DeviceSpec::h200().to_json();
        let dup = j.replacen('{', "{\"deviceVer\": 800, ", 1);
        refused(&dup, "repeat a key");
    }

    /// Property: any integer in any integer key is accepted exactly when
    /// it lies in the key's range (the table here, written from the plan
    /// loader's documented ranges, not from `property_fault`).
    #[test]
    fn properties_random_integers() {
        use proptest::prelude::*;
        use proptest::test_runner::{Config, TestRunner};
        let range = |k: &str| match k {
            "totalGlobalMem" => (1, i64::MAX),
            "pciDeviceId"
            | "isTccDriver"
            | "cudaDeviceId"
            | "reservedSharedMemoryPerBlock"
            | "supportCoopLaunch"
            | "smCountOrigin"
            | "oversizedSharedMemoryPerBlock" => (0, i64::from(i32::MAX)),
            _ => (1, i64::from(i32::MAX)),
        };
        let keys: Vec<&str> = REQUIRED_FIELDS
            .iter()
            .chain(EXTRA_PROFILE_FIELDS.iter())
            .copied()
            .filter(|k| {
                !matches!(
                    *k,
                    "deviceName" | "deviceVer" | "maxGridSize" | "maxBlockSize"
                )
            })
            .collect();
        let values = prop_oneof![
            -2i64..3,
            Just(i64::from(i32::MAX)),
            Just(i64::from(i32::MAX) + 1),
            Just(i64::MAX),
            Just(i64::MIN),
            any::<i64>(),
        ];
        let mut runner = TestRunner::new(Config {
            cases: 512,
            failure_persistence: None,
            ..Config::default()
        });
        runner
            .run(&(0..keys.len(), values), |(i, v)| {
                let k = keys[i];
                let (lo, hi) = range(k);
                let got = DeviceProperties::from_json(&with(k, json!(v)));
                prop_assert_eq!(
                    got.is_ok(),
                    (lo..=hi).contains(&v),
                    "{} = {}: {:?}",
                    k,
                    v,
                    got
                );
                Ok(())
            })
            .unwrap();
    }

    /// The same values are refused by the loader's device profile check.
    #[test]
    fn property_fault_is_the_loader_rule() {
        for (k, v, bad) in [
            ("deviceName", json!(""), true),
            ("smCountOrigin", json!(-1), true),
            ("oversizedSharedMemoryPerBlock", json!(0), false),
            ("maxGridSize", json!([1, 2, 3]), false),
            ("maxGridSize", json!([1, 2, 0]), true),
            ("notAProperty", json!(1), false),
        ] {
            let got = property_fault(k, &v);
            match (k, got) {
                ("notAProperty", None) => {}
                (_, Some(r)) => assert_eq!(r.is_err(), bad, "{k} {v}"),
                (_, None) => panic!("{k}: not a property?"),
            }
        }
    }
}
