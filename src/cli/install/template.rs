//! academy's containerd conf_template, as `academy install --template` writes it.

use ipnetwork::IpNetwork;

/// academy's containerd conf_template (dual stack through .PodCIDRRanges).
const TEMPLATE: &str = include_str!("../../../conflists/containerd-template.conflist.tmpl");
/// The template's line after which `--cluster-cidr` puts the masquerade's keys.
const MASQ_ANCHOR: &str = "      \"isDefaultGateway\": true,\n";
/// Its file name in the config folder: containerd's libcni only loads *.conf,
/// *.conflist and *.json from conf_dir, so the template itself is never read as a network.
pub(super) const TEMPLATE_NAME: &str = "academy.conflist.tmpl";

/// One `--cluster-cidr` value: prefixes, comma-separated, as the controller manager's
/// `--cluster-cidr` takes them (`10.244.0.0/16,fd00:10:244::/56`).
pub(super) fn cluster_cidrs(list: &str) -> Result<Vec<IpNetwork>, String> {
    list.split(',')
        .map(str::trim)
        .map(|text| {
            let cidr: IpNetwork = text
                .parse()
                .ok()
                .filter(|_| text.contains('/'))
                .ok_or_else(|| {
                    format!("--cluster-cidr {text:?} is not a CIDR (e.g. 10.244.0.0/16)")
                })?;
            if cidr.network() != cidr.ip() {
                return Err(format!(
                    "--cluster-cidr {text:?} has host bits set; did you mean {}/{}?",
                    cidr.network(),
                    cidr.prefix()
                ));
            }
            Ok(cidr)
        })
        .collect()
}

/// The template to install: the shipped one, or with `cluster` the same with
/// `"ipMasq": true` and `"nonMasqueradeCIDRs"` after `isDefaultGateway`, so a pod's
/// traffic to another node's pods keeps its address and the rest is masqueraded.
pub(super) fn template(cluster: &[IpNetwork]) -> String {
    if cluster.is_empty() {
        return TEMPLATE.to_string();
    }
    let list: Vec<String> = cluster.iter().map(|c| format!("\"{c}\"")).collect();
    let keys = format!(
        "      \"ipMasq\": true,\n      \"nonMasqueradeCIDRs\": [{}],\n",
        list.join(", ")
    );
    TEMPLATE.replacen(MASQ_ANCHOR, &format!("{MASQ_ANCHOR}{keys}"), 1)
}

/// The template as containerd renders it for one pod CIDR, parsed as libcni hands
/// the academy entry to the plugin (the list's cniVersion and name injected).
#[cfg(test)]
pub(super) fn rendered(
    template: &str,
    pod_cidr: &str,
) -> (serde_json::Value, crate::config::Config) {
    let start = template.find("{{- range").expect("the range block");
    let end = template.find("{{- end}}").expect("its end") + "{{- end}}".len();
    let text = format!(
        "{}[{{ \"subnet\": \"{pod_cidr}\" }}]{}",
        &template[..start],
        &template[end..]
    );
    let list: serde_json::Value = serde_json::from_str(&text).expect("rendered JSON");
    let mut plugin = list["plugins"][0].clone();
    plugin["cniVersion"] = list["cniVersion"].clone();
    plugin["name"] = list["name"].clone();
    let conf = crate::config::Config::parse(plugin.to_string().as_bytes()).unwrap();
    (list, conf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_template_asks_containerd_for_every_pod_cidr_range() {
        assert!(
            TEMPLATE.contains("range $i, $range := .PodCIDRRanges"),
            "{TEMPLATE}"
        );
        assert!(TEMPLATE.contains(r#""type": "academy""#), "{TEMPLATE}");
    }

    /// CNI 1.1's version negotiation: libcni 1.2 and later take the highest of
    /// cniVersions it knows (1.1.0); older ones read cniVersion (1.0.0) and ignore it.
    #[test]
    fn the_template_declares_cni_versions_beside_cni_version() {
        let (list, conf) = rendered(TEMPLATE, "10.244.1.0/24");
        assert_eq!(list["cniVersion"], "1.0.0");
        assert_eq!(list["cniVersions"], serde_json::json!(["1.0.0", "1.1.0"]));
        assert_eq!(template(&[]), TEMPLATE);
        // Without --cluster-cidr, no masquerade (as before).
        assert!(!conf.ip_masq && conf.non_masquerade_cidrs.is_empty());
    }
}
