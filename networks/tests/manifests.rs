//! The seed's example manifests are accepted; every validation refuses its manifest
//! with its field and message.

use ferrule_dataplane::wire::IpCidr;
use ferrule_networks::manifest::{parse_text, IpamMode, Object, Role, Topology};
use ferrule_networks::validate::{validate_cudn, validate_udn, NetworkConfig};
use ferrule_networks::{Invalid, Settings};

fn cidr(s: &str) -> IpCidr {
    ferrule_networks::validate::parse_cidr(s).unwrap()
}

fn data(name: &str) -> String {
    std::fs::read_to_string(format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

/// Parses and validates every network of a text.
fn check(text: &str) -> Result<Vec<NetworkConfig>, Invalid> {
    let settings = Settings::default();
    let mut out = Vec::new();
    for o in parse_text(text)? {
        match o {
            Object::UserDefinedNetwork(u) => out.push(validate_udn(&u, &settings)?),
            Object::ClusterUserDefinedNetwork(c) => out.push(validate_cudn(&c, &settings)?.1),
            _ => {}
        }
    }
    Ok(out)
}

#[test]
fn seed_udn_example_is_accepted() {
    let objects = parse_text(&data("udn-db-network.yaml")).unwrap();
    assert_eq!(objects.len(), 2);
    assert!(matches!(&objects[0], Object::Namespace(n) if n.name == "demo"));
    let c = check(&data("udn-db-network.yaml")).unwrap().remove(0);
    assert_eq!(c.topology, Topology::Layer2);
    assert_eq!(c.role, Role::Primary);
    assert_eq!(c.mtu, 9000);
    assert_eq!(c.subnets[0].cidr, cidr("10.0.0.0/24"));
    assert_eq!(c.subnets[0].host_len, None);
    assert_eq!(c.exclude_subnets, vec![cidr("10.0.0.0/26")]);
    assert!(c.persistent_ips);
    assert_eq!(c.ipam_mode, IpamMode::Enabled);
    // A primary network without joinSubnets gets the default of its families.
    assert_eq!(c.join_subnets, vec![cidr("100.65.0.0/16")]);
}

#[test]
fn seed_cudn_example_is_accepted() {
    let objects = parse_text(&data("cudn-db-network.yaml")).unwrap();
    // Three namespaces from the List, then the network.
    assert_eq!(objects.len(), 4);
    let Object::ClusterUserDefinedNetwork(c) = &objects[3] else {
        panic!("{objects:?}")
    };
    assert_eq!(c.name, "db-network");
    assert_eq!(c.spec.paths.base, "spec.template");
    let configs = check(&data("cudn-db-network.yaml")).unwrap();
    // The seed's excludeSubnets "10.0.0.100/26" has host bits: it is 10.0.0.64/26.
    assert_eq!(configs[0].exclude_subnets, vec![cidr("10.0.0.64/26")]);
    assert_eq!(configs[0].mtu, 9000);
}

#[test]
fn seed_layer3_nad_example_is_accepted_flat_and_nested() {
    let objects = parse_text(&data("layer3-nad-style.yaml")).unwrap();
    assert!(matches!(&objects[2], Object::Ignored { kind, name }
        if kind == "NetworkPolicy" && name == "default/deny-all"));
    let configs = check(&data("layer3-nad-style.yaml")).unwrap();
    assert_eq!(configs.len(), 2);
    let c = &configs[0];
    assert_eq!(c.topology, Topology::Layer3);
    assert_eq!(c.subnets[0].cidr, cidr("10.128.0.0/16"));
    assert_eq!(c.subnets[0].host_len, Some(24));
    assert_eq!(c.subnets[1].cidr, cidr("2600:db8::/29"));
    assert_eq!(c.subnets[1].host_len, Some(64));
    assert_eq!(
        c.join_subnets,
        vec![cidr("100.65.0.0/24"), cidr("fd99::/64")]
    );
    assert_eq!(c.mtu, 1400);
    // The nested upstream form of the same network validates to the same thing.
    assert_eq!(configs[0], configs[1]);
}

#[test]
fn cudn_template_spec_form_and_json_are_accepted() {
    let json = r#"{"apiVersion":"k8s.ovn.org/v1","kind":"ClusterUserDefinedNetwork",
        "metadata":{"name":"blue"},
        "spec":{"namespaceSelector":{"matchLabels":{"tenant":"blue"}},
                "template":{"spec":{"topology":"Layer2","role":"Secondary",
                                    "ipam":{"mode":"Disabled"}}}}}"#;
    let c = check(json).unwrap().remove(0);
    assert_eq!(c.ipam_mode, IpamMode::Disabled);
    assert!(c.subnets.is_empty());
    // Secondary: join subnets are ignored.
    assert!(c.join_subnets.is_empty());

    let localnet = "kind: ClusterUserDefinedNetwork
metadata: {name: phys}
spec:
  namespaceSelector: {}
  network:
    topology: Localnet
    localnet:
      role: Secondary
      physicalNetworkName: physnet1
      subnets: [192.168.10.0/24]
      excludeSubnets: [192.168.10.0/28]
      vlan: {mode: Access, access: {id: 200}}
      ipam: {lifecycle: Persistent}
";
    let c = check(localnet).unwrap().remove(0);
    assert_eq!(c.vlan, Some(200));
    assert_eq!(c.physical_network.as_deref(), Some("physnet1"));
    assert!(c.persistent_ips);
}

fn udn(spec: &str) -> String {
    format!("kind: UserDefinedNetwork\nmetadata: {{name: net, namespace: ns}}\nspec: {spec}\n")
}

fn cudn(spec: &str) -> String {
    format!("kind: ClusterUserDefinedNetwork\nmetadata: {{name: net}}\nspec: {spec}\n")
}

#[test]
fn invalid_display_names_object_field_and_message() {
    let e = check(&udn(
        "{topology: Layer2, role: Primary, subnets: [10.1.0.0/16, 10.0.0.0/33]}",
    ))
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        r#"UserDefinedNetwork ns/net: spec.subnets[1]: "10.0.0.0/33" is not a valid CIDR"#
    );
}

/// One refused manifest per validation: (manifest, field, message). A message starting
/// with `=` must match exactly (the seed's messages); otherwise it must be contained.
#[test]
fn every_validation_refuses_with_its_field_and_message() {
    let l2 = "topology: Layer2, role: Secondary";
    let cases: Vec<(String, &str, &str)> = vec![
        // The CRD's rules.
        (udn("{topology: Layer3, role: Primary}"), "spec.subnets", "=Subnets is required for Layer3 topology"),
        (udn("{topology: Localnet, role: Primary, subnets: [10.5.0.0/16]}"), "spec.role", "=Topology localnet is not supported for primary network"),
        (udn("{topology: Layer3, role: Primary, subnets: [10.5.0.0/16], ipamLifecycle: Persistent}"), "spec.ipamLifecycle", "=ipamLifecycle is supported for Layer2 and Localnet topologies"),
        (udn("{topology: Layer3, role: Secondary, subnets: [10.5.0.0/16], ipam: {lifecycle: Persistent}}"), "spec.ipam.lifecycle", "=ipamLifecycle is supported for Layer2 and Localnet topologies"),
        (udn("{topology: Layer3, role: Secondary, subnets: [10.5.0.0/16], ipam: {mode: Disabled}}"), "spec.ipam.mode", "only supported for Layer2 and Localnet topologies of Secondary networks"),
        (udn("{topology: Layer2, role: Primary, ipam: {mode: Disabled}}"), "spec.ipam.mode", "only supported for Layer2 and Localnet topologies of Secondary networks"),
        (udn(&format!("{{{l2}, subnets: [10.5.0.0/16], ipam: {{mode: Disabled}}}}")), "spec.subnets", "=Subnets must be omitted when ipam.mode is Disabled"),
        (udn(&format!("{{{l2}, ipam: {{mode: Disabled, lifecycle: Persistent}}}}")), "spec.ipam.lifecycle", "only supported when ipam.mode is Enabled"),
        (udn(&format!("{{{l2}}}")), "spec.subnets", "=Subnets is required with ipam.mode is Enabled or unset"),
        (udn("{topology: Localnet, role: Secondary, ipam: {mode: Enabled}}"), "spec.subnets", "=Subnets is required with ipam.mode is Enabled or unset"),
        // CIDRs.
        (udn(&format!("{{{l2}, subnets: [10.1.0.0/16, 10.0.0.0/33]}}")), "spec.subnets[1]", r#"="10.0.0.0/33" is not a valid CIDR"#),
        (udn(&format!("{{{l2}, subnets: [10.1.0.0]}}")), "spec.subnets[0]", r#"="10.1.0.0" is not a valid CIDR"#),
        (udn(&format!("{{{l2}, subnets: [10.1.0.5/16]}}")), "spec.subnets[0]", "has host bits set: the network is 10.1.0.0/16"),
        (udn(&format!("{{{l2}, subnets: [10.1.0.0/16, 'fd00::/64', 10.2.0.0/16]}}")), "spec.subnets", "at most 2 subnets"),
        (udn(&format!("{{{l2}, subnets: [10.1.0.0/16, 10.2.0.0/16]}}")), "spec.subnets[1]", "at most one subnet per IP family"),
        (udn(&format!("{{{l2}, subnets: [10.1.0.0/16/24]}}")), "spec.subnets[0]", "only supported for Layer3 topology"),
        (udn("{topology: Localnet, role: Secondary, subnets: [10.1.0.0/16/24]}"), "spec.subnets[0]", "only supported for Layer3 topology"),
        (udn("{topology: Layer3, role: Secondary, subnets: [10.1.0.0/16/16]}"), "spec.subnets[0]", "host subnet length /16 must be longer than the subnet's /16"),
        (udn("{topology: Layer3, role: Secondary, subnets: [10.1.0.0/16/31]}"), "spec.subnets[0]", "too long for IPv4 (at most /30)"),
        (udn("{topology: Layer3, role: Secondary, subnets: ['fd00:1::/48/127']}"), "spec.subnets[0]", "too long for IPv6 (at most /126)"),
        (udn("{topology: Layer3, role: Secondary, subnets: [10.1.0.0/24]}"), "spec.subnets[0]", "defaults to /24"),
        (udn("{topology: Layer3, role: Secondary, subnets: ['fd00:1::/64']}"), "spec.subnets[0]", "defaults to /64"),
        (udn("{topology: Layer3, layer3: {role: Secondary, subnets: [{cidr: 10.1.0.0/16, hostSubnet: 8}]}}"), "spec.layer3.subnets[0].hostSubnet", "must be longer than"),
        (udn("{topology: Layer3, layer3: {role: Secondary, subnets: [{cidr: 10.1.0.0/40}]}}"), "spec.layer3.subnets[0].cidr", "is not a valid CIDR"),
        // excludeSubnets.
        (udn(&format!("{{{l2}, subnets: [10.1.0.0/16], excludeSubnets: [10.2.0.0/24]}}")), "spec.excludeSubnets[0]", "is not inside any subnet of the network"),
        (udn(&format!("{{{l2}, subnets: [10.1.0.0/16], excludeSubnets: [10.1.0.0/24, nope]}}")), "spec.excludeSubnets[1]", "is not a valid CIDR"),
        // Join subnets.
        (udn("{topology: Layer2, role: Primary, subnets: [10.1.0.0/16], joinSubnets: []}"), "spec.joinSubnets", "=Unexpected number of join subnets"),
        (udn("{topology: Layer2, role: Primary, subnets: [10.1.0.0/16], joinSubnets: [100.65.0.0/16, 'fd99::/64', 100.66.0.0/16]}"), "spec.joinSubnets", "=Unexpected number of join subnets"),
        (udn("{topology: Layer2, role: Primary, subnets: [10.1.0.0/16], joinSubnets: [100.65.0.0/16, 100.66.0.0/16]}"), "spec.joinSubnets[1]", "at most one join subnet per IP family"),
        (udn("{topology: Layer2, role: Primary, subnets: [10.1.0.0/16], joinSubnets: [100.64.1.0/24]}"), "spec.joinSubnets[0]", "100.64.1.0/24 overlaps the cluster default network's join subnet 100.64.0.0/16"),
        (udn("{topology: Layer2, role: Primary, subnets: [10.1.0.0/16], joinSubnets: ['fd98::/64']}"), "spec.joinSubnets[0]", "overlaps the cluster default network's join subnet fd98::/64"),
        (udn("{topology: Layer2, role: Primary, subnets: [10.1.0.0/16, 'fd00:1::/64'], joinSubnets: [100.65.0.0/16]}"), "spec.joinSubnets", "no IPv6 join subnet for the IPv6 subnet fd00:1::/64"),
        (udn("{topology: Layer2, role: Primary, subnets: [10.1.0.0/16], joinSubnets: [100.65.0.0/33]}"), "spec.joinSubnets[0]", "is not a valid CIDR"),
        // Subnets vs the cluster's prefixes.
        (udn(&format!("{{{l2}, subnets: [10.244.0.0/24]}}")), "spec.subnets[0]", "10.244.0.0/24 overlaps the cluster default network's subnet 10.244.0.0/16"),
        (udn(&format!("{{{l2}, subnets: [10.96.0.0/12]}}")), "spec.subnets[0]", "overlaps the service subnet 10.96.0.0/16"),
        (udn(&format!("{{{l2}, subnets: [169.254.0.0/16]}}")), "spec.subnets[0]", "overlaps the masquerade subnet 169.254.169.0/24"),
        (udn(&format!("{{{l2}, subnets: [10.1.0.0/16, 'fd69::/64']}}")), "spec.subnets[1]", "overlaps the masquerade subnet fd69::/112"),
        (udn(&format!("{{{l2}, subnets: [100.64.0.0/24]}}")), "spec.subnets[0]", "overlaps the cluster default network's join subnet 100.64.0.0/16"),
        (udn("{topology: Layer2, role: Primary, subnets: [100.65.1.0/24]}"), "spec.subnets[0]", "overlaps the network's join subnet 100.65.0.0/16"),
        // MTU.
        (udn(&format!("{{{l2}, subnets: [10.1.0.0/16], mtu: 100}}")), "spec.mtu", "100 is out of range 576..=9216"),
        (udn(&format!("{{{l2}, subnets: [10.1.0.0/16], mtu: 70000}}")), "spec.mtu", "70000 is out of range 576..=9216"),
        (udn(&format!("{{{l2}, subnets: ['fd00:1::/64'], mtu: 1000}}")), "spec.mtu", "below 1280"),
        // Names.
        ("kind: UserDefinedNetwork\nmetadata: {name: Db_Net, namespace: ns}\nspec: {topology: Layer2, role: Secondary, subnets: [10.1.0.0/16]}".into(), "metadata.name", "DNS-1123 label"),
        (format!("kind: UserDefinedNetwork\nmetadata: {{name: net, namespace: {}}}\nspec: {{topology: Layer2, role: Secondary, subnets: [10.1.0.0/16]}}", "n".repeat(64)), "metadata.namespace", "DNS-1123 label"),
        (cudn("{namespaceSelector: {}, network: {topology: Layer2, layer2: {role: Secondary, subnets: [10.1.0.0/16]}}}").replace("name: net", "name: a.b"), "metadata.name", "DNS-1123 label"),
        ("kind: UserDefinedNetwork\nmetadata: {name: net}\nspec: {topology: Layer2, role: Secondary, subnets: [10.1.0.0/16]}".into(), "metadata.namespace", "required"),
        // Localnet.
        (udn("{topology: Localnet, role: Secondary, subnets: [10.1.0.0/16], vlan: {mode: Access, access: {id: 4095}}}"), "spec.vlan.access.id", "4095 is not a VLAN id (1..=4094)"),
        (udn("{topology: Localnet, role: Secondary, subnets: [10.1.0.0/16], vlan: {mode: Trunk}}"), "spec.vlan.mode", "the only supported mode is Access"),
        (udn("{topology: Localnet, role: Secondary, subnets: [10.1.0.0/16], vlan: {mode: Access}}"), "spec.vlan.access", "required when vlan.mode is Access"),
        (udn("{topology: Layer2, role: Secondary, subnets: [10.1.0.0/16], vlan: {mode: Access, access: {id: 3}}}"), "spec.vlan", "only supported for Localnet topology"),
        (udn("{topology: Layer2, role: Secondary, subnets: [10.1.0.0/16], physicalNetworkName: p}"), "spec.physicalNetworkName", "only supported for Localnet topology"),
        (udn("{topology: Localnet, localnet: {role: Secondary, physicalNetworkName: ' ', subnets: [10.1.0.0/16]}}"), "spec.localnet.physicalNetworkName", "not a valid physical network name"),
        (udn("{topology: Localnet, localnet: {role: Secondary, subnets: [10.1.0.0/16]}}"), "spec.localnet", "missing field `physicalNetworkName`"),
        (udn("{topology: Localnet, localnet: {role: Secondary, physicalNetworkName: p, subnets: [10.1.0.0/16], vlan: {mode: Access, access: {id: 0}}}}"), "spec.localnet.vlan.access.id", "0 is not a VLAN id"),
        // Shape.
        (udn(&format!("{{{l2}, subnet: [10.1.0.0/16]}}")), "spec.subnet", "unknown field `subnet`"),
        (udn("{topology: Layer4, role: Primary}"), "spec.topology", "unknown variant `Layer4`"),
        (udn("{topology: Layer2, role: Tertiary}"), "spec.role", "unknown variant `Tertiary`"),
        (udn("{topology: Layer2, subnets: [10.1.0.0/16]}"), "spec.role", "required"),
        (udn("{topology: Layer2, layer3: {role: Primary, subnets: [{cidr: 10.1.0.0/16}]}}"), "spec.layer3", "spec.layer3 is required when topology is Layer3 and not allowed otherwise"),
        (udn("{topology: Layer3, role: Primary, layer3: {role: Primary, subnets: [{cidr: 10.1.0.0/16}]}}"), "spec.role", "not allowed next to spec.layer3"),
        (udn("{topology: Layer3, layer3: {role: Primary, subnets: [{cidr: 10.1.0.0/16, hostSubnets: 24}]}}"), "spec.layer3.subnets[0].hostSubnets", "unknown field `hostSubnets`"),
        (udn("{topology: Layer2, role: Secondary, subnets: [10.1.0.0/16], mtu: big}"), "spec.mtu", "invalid type"),
        ("apiVersion: k8s.ovn.org/v2\n".to_string() + &udn(&format!("{{{l2}, subnets: [10.1.0.0/16]}}")), "apiVersion", "expected k8s.ovn.org/v1"),
        (udn(&format!("{{{l2}, subnets: [10.1.0.0/16]}}")) + "extra: 1\n", "extra", "unknown field `extra`"),
        // CUDN.
        (cudn("{namespaceSelector: {matchExpressions: [{key: a, operator: Has}]}, network: {topology: Layer2, layer2: {role: Secondary, subnets: [10.1.0.0/16]}}}"), "spec.namespaceSelector.matchExpressions[0].operator", "expected In, NotIn, Exists or DoesNotExist"),
        (cudn("{namespaceSelector: {}, network: {topology: Layer2, layer2: {role: Secondary, subnets: [10.1.0.0/16]}}, template: {topology: Layer2, role: Secondary, subnets: [10.1.0.0/16]}}"), "spec.template", "give only one"),
        (cudn("{namespaceSelector: {}}"), "spec.network", "required"),
        (cudn("{network: {topology: Layer2, layer2: {role: Secondary, subnets: [10.1.0.0/16]}}}"), "spec.namespaceSelector", "required"),
        (cudn("{namespaceSelector: {}, networks: {}}"), "spec.networks", "unknown field `networks`"),
        (cudn("{namespaceSelector: {}, template: {spec: {topology: Layer3, role: Primary}}}"), "spec.template.spec.subnets", "=Subnets is required for Layer3 topology"),
        (cudn("{namespaceSelector: {}, network: {topology: Layer2, layer2: {role: Secondary, subnets: [10.1.0.0/16], mtu: 1}}}"), "spec.network.layer2.mtu", "out of range"),
    ];
    let mut failures = Vec::new();
    for (text, field, message) in &cases {
        let e = match check(text) {
            Ok(c) => {
                failures.push(format!("accepted: {text}\n  {c:?}"));
                continue;
            }
            Err(e) => e,
        };
        let ok_message = match message.strip_prefix('=') {
            Some(exact) => e.message == exact,
            None => e.message.contains(message),
        };
        if e.field != *field || !ok_message {
            failures.push(format!(
                "{text}\n  expected {field}: {message}\n  got      {}: {}",
                e.field, e.message
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn settings_change_what_overlaps() {
    let text = udn("{topology: Layer2, role: Secondary, subnets: [10.244.0.0/24]}");
    assert!(check(&text).is_err());
    let settings = Settings {
        cluster_subnets: vec![cidr("10.128.0.0/14")],
        ..Settings::default()
    };
    let Object::UserDefinedNetwork(u) = parse_text(&text).unwrap().remove(0) else {
        panic!()
    };
    assert!(validate_udn(&u, &settings).is_ok());
}

#[test]
fn documents_errors_and_empty_documents() {
    assert!(parse_text("---\n---\n").unwrap().is_empty());
    let e = parse_text("kind: Namespace\nmetadata: {name: a}\n---\nkind: [\n").unwrap_err();
    assert_eq!(e.object, "document 2");
    assert!(e.to_string().starts_with("document 2: "), "{e}");
    assert!(!e.to_string().starts_with("document 2: : "), "{e}");
    let e = parse_text("metadata: {name: a}\n").unwrap_err();
    assert_eq!(
        (e.object.as_str(), e.field.as_str()),
        ("document 1", "kind")
    );
}
