//! Rank 0 cannot listen because the rendezvous port is taken: say why and
//! what to set.
//!
//! Under torchrun, `MASTER_ADDR:MASTER_PORT` is where torchrun's own TCP
//! store listens (its agent binds it before the workers start), so a
//! rendezvous read from those variables finds the port in use on rank 0.
//! The fix is a port of this crate's own, in `CUDNN_RS_RENDEZVOUS`.

use super::address::RENDEZVOUS_VAR;

/// Variables torchrun (torch.distributed.elastic) sets for its workers:
/// their presence says the taken port is torchrun's store.
pub(crate) const TORCHRUN_VARS: [&str; 4] = [
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS",
    "GROUP_RANK",
];

/// What to tell rank 0 when every address of `host:port` was in use.
/// `var` reads the environment (a function, so tests need not touch it).
pub(crate) fn hint(host: &str, port: u16, var: &dyn Fn(&str) -> Option<String>) -> String {
    let from_master = var("MASTER_PORT").is_some_and(|p| p.trim() == port.to_string())
        && var(RENDEZVOUS_VAR).is_none();
    let fix = format!("set {RENDEZVOUS_VAR}=tcp://{host}:<a free port> (the same for every rank)");
    match TORCHRUN_VARS.iter().find(|v| var(v).is_some()) {
        Some(v) if from_master => format!(
            "port {port} is already in use: this is a torchrun job ({v} is set), and \
             MASTER_PORT is torchrun's own TCP store, so this crate's rendezvous cannot \
             listen there; {fix}"
        ),
        _ if from_master => format!(
            "port {port} (MASTER_PORT) is already in use: another process listens there \
             (under torchrun, its own TCP store); {fix}"
        ),
        _ => format!("port {port} is already in use by another process; {fix}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k: &str| m.get(k).cloned()
    }

    #[test]
    fn unit_torchrun_port_names_the_variable_to_set() {
        let torchrun = vars(&[
            ("MASTER_ADDR", "node0"),
            ("MASTER_PORT", "29500"),
            ("TORCHELASTIC_RUN_ID", "abc"),
            ("GROUP_RANK", "0"),
        ]);
        let h = hint("node0", 29500, &torchrun);
        assert!(
            h.contains("torchrun job (TORCHELASTIC_RUN_ID is set)"),
            "{h}"
        );
        assert!(
            h.contains("set CUDNN_RS_RENDEZVOUS=tcp://node0:<a free port>"),
            "{h}"
        );
        // GROUP_RANK alone (an older torch) is enough.
        let h = hint(
            "node0",
            29500,
            &vars(&[("MASTER_PORT", "29500"), ("GROUP_RANK", "0")]),
        );
        assert!(h.contains("GROUP_RANK is set"), "{h}");
        // MASTER_PORT without torchrun: still says what to set.
        let h = hint("h", 29500, &vars(&[("MASTER_PORT", " 29500 ")]));
        assert!(
            h.contains("(MASTER_PORT) is already in use") && h.contains(RENDEZVOUS_VAR),
            "{h}"
        );
        // An explicit rendezvous on another port that is taken.
        let h = hint(
            "h",
            4000,
            &vars(&[
                ("MASTER_PORT", "29500"),
                ("TORCHELASTIC_RUN_ID", "x"),
                (RENDEZVOUS_VAR, "tcp://h:4000"),
            ]),
        );
        assert!(
            h.starts_with("port 4000 is already in use by another process"),
            "{h}"
        );
    }

    proptest::proptest! {
        /// Whatever the environment holds, the hint names the port and the
        /// variable to set, and blames torchrun only when its variables are
        /// set and the port is MASTER_PORT's.
        #[test]
        fn unit_property_hint_always_names_the_fix(
            port in 1u16..,
            master in proptest::option::of(0u16..),
            torch in proptest::option::of(0usize..TORCHRUN_VARS.len()),
            explicit in proptest::bool::ANY,
        ) {
            let mut pairs: Vec<(String, String)> = Vec::new();
            if let Some(m) = master {
                pairs.push(("MASTER_PORT".into(), m.to_string()));
            }
            if let Some(t) = torch {
                pairs.push((TORCHRUN_VARS[t].into(), "1".into()));
            }
            if explicit {
                pairs.push((RENDEZVOUS_VAR.into(), format!("tcp://h:{port}")));
            }
            let var = |k: &str| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
            let h = hint("h", port, &var);
            proptest::prop_assert!(h.contains(&format!("port {port}")), "{}", h);
            proptest::prop_assert!(h.contains(RENDEZVOUS_VAR), "{}", h);
            let blames = h.contains("torchrun job");
            proptest::prop_assert_eq!(
                blames,
                torch.is_some() && master == Some(port) && !explicit
            );
        }
    }

    /// The real thing: a port held by another listener (torchrun's store
    /// stands in), and rank 0 of a 2-rank job told to serve there. The
    /// error comes at once (no wait for the deadline) and says what to set.
    #[test]
    fn unit_rank0_on_a_taken_port_says_to_set_the_rendezvous() {
        let held = std::net::TcpListener::bind(("127.0.0.1", 0)).expect("bind a free port");
        let port = held.local_addr().expect("its address").port();
        let ranks = crate::nccl::Ranks::new(0, 2).expect("ranks");
        let id =
            crate::nccl::UniqueId::from_bytes(&[7u8; crate::nccl::UNIQUE_ID_BYTES]).expect("an id");
        let started = std::time::Instant::now();
        let e = super::super::tcp::serve(
            "127.0.0.1",
            port,
            ranks,
            &id,
            None,
            false,
            super::super::deadline::Deadline::after(std::time::Duration::from_secs(30)),
        )
        .expect_err("the port is taken");
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
        assert!(e.contains(&format!("port {port}")), "{e}");
        assert!(e.contains(RENDEZVOUS_VAR), "{e}");
        drop(held);
    }
}
