//! The EC2 API as the daemon uses it: an `aws-sdk-ec2` client configured from the
//! SDK's standard environment (region, endpoint, credentials) with the SDK's own
//! retries off and attempt timeouts on, wrapped by one retry loop (exponential backoff
//! with full jitter on throttling, 5xx, timeouts and connection errors) that counts
//! every attempt by operation and outcome. Each operation returns plain values.

use std::future::Future;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, Region};
use aws_sdk_ec2::config::http::HttpResponse;
use aws_sdk_ec2::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_ec2::types::{
    Filter, InstanceType, NetworkInterface, NetworkInterfaceAttachmentChanges, ResourceType, Tag,
    TagSpecification,
};
use rand::Rng;

use crate::metrics::Metrics;

/// Tag key naming the cluster on the ENIs the daemon creates.
pub const CLUSTER_TAG: &str = "ferrule.io/cluster";
/// Tag key naming the instance an ENI was created for.
pub const INSTANCE_TAG: &str = "ferrule.io/instance-id";
/// Tag key holding when the ENI was created (seconds since the Unix epoch).
pub const CREATED_TAG: &str = "ferrule.io/created-at";

/// How the client reaches EC2 and how hard it tries.
#[derive(Debug, Clone)]
pub struct Ec2Options {
    pub region: String,
    /// An endpoint URL; `None`: the SDK's (`AWS_ENDPOINT_URL_EC2`, `AWS_ENDPOINT_URL`,
    /// else the region's).
    pub endpoint: Option<String>,
    /// Static credentials (tests); `None`: the SDK's default chain.
    pub static_credentials: Option<(String, String)>,
    /// Attempts per call before giving up until the next reconcile.
    pub max_attempts: u32,
    /// First backoff; doubles each attempt, with full jitter.
    pub backoff_base: Duration,
    /// Largest backoff.
    pub backoff_max: Duration,
    /// Time limit of one attempt.
    pub attempt_timeout: Duration,
}

/// Why an EC2 call failed (after its retries).
#[derive(Debug, Clone, thiserror::Error)]
#[error("EC2 {operation} failed after {attempts} attempt(s): {code}: {message}")]
pub struct Ec2Error {
    pub operation: &'static str,
    pub code: String,
    pub message: String,
    pub retryable: bool,
    pub attempts: u32,
}

/// An ENI as EC2 describes it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EniDesc {
    pub id: String,
    pub mac: String,
    /// `available`, `in-use`, `attaching`, `detaching`…
    pub status: String,
    pub device_index: Option<u32>,
    pub attachment_id: Option<String>,
    /// `attaching`, `attached`, `detaching`, `detached`.
    pub attachment_status: Option<String>,
    pub instance_id: Option<String>,
    pub subnet_id: String,
    pub vpc_id: String,
    pub primary_ip: Option<Ipv4Addr>,
    pub secondary_ips: Vec<Ipv4Addr>,
    pub security_groups: Vec<String>,
    pub tags: Vec<(String, String)>,
}

impl EniDesc {
    /// The value of tag `key`.
    pub fn tag(&self, key: &str) -> Option<&str> {
        self.tags
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// The instance as EC2 describes it.
#[derive(Debug, Clone, Default)]
pub struct InstanceDesc {
    pub instance_type: String,
    pub subnet_id: String,
    pub vpc_id: String,
}

/// A subnet as EC2 describes it.
#[derive(Debug, Clone, Default)]
pub struct SubnetDesc {
    pub cidr: String,
    pub available_ips: u32,
    pub vpc_id: String,
}

/// The EC2 client with its retry loop and counters.
#[derive(Clone)]
pub struct Ec2 {
    client: aws_sdk_ec2::Client,
    metrics: Arc<Metrics>,
    options: Ec2Options,
}

/// Error codes EC2 uses for throttling.
const THROTTLING: &[&str] = &[
    "RequestLimitExceeded",
    "Throttling",
    "ThrottlingException",
    "RequestThrottled",
    "SlowDown",
    "EC2ThrottledException",
];

/// Error codes of EC2's own transient failures (whatever the HTTP status says).
const TRANSIENT: &[&str] = &[
    "InternalError",
    "InternalFailure",
    "ServiceUnavailable",
    "Unavailable",
];

/// How one failed attempt is counted and whether it is tried again.
struct Failure {
    outcome: &'static str,
    code: String,
    message: String,
    retryable: bool,
}

fn classify<E>(err: &SdkError<E, HttpResponse>) -> Failure
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let message = DisplayErrorContext(err).to_string();
    let (outcome, code, retryable) = match err {
        SdkError::TimeoutError(_) => ("timeout", "Timeout".to_string(), true),
        SdkError::DispatchFailure(d) if d.is_timeout() => ("timeout", "Timeout".to_string(), true),
        SdkError::DispatchFailure(_) => ("network", "ConnectionError".to_string(), true),
        SdkError::ResponseError(_) => ("network", "BadResponse".to_string(), true),
        SdkError::ServiceError(service) => {
            let status = service.raw().status().as_u16();
            let code = service.err().code().unwrap_or("Unknown").to_string();
            if THROTTLING.contains(&code.as_str()) || status == 429 {
                ("throttled", code, true)
            } else if status >= 500 || TRANSIENT.contains(&code.as_str()) {
                ("server_error", code, true)
            } else {
                ("client_error", code, false)
            }
        }
        _ => ("client_error", "ConstructionFailure".to_string(), false),
    };
    Failure {
        outcome,
        code,
        message,
        retryable,
    }
}

impl Ec2 {
    /// Builds the client from the SDK's environment and `options`.
    pub async fn connect(options: Ec2Options, metrics: Arc<Metrics>) -> Ec2 {
        let mut loader = aws_config::defaults(BehaviorVersion::latest())
            .region(Region::new(options.region.clone()))
            .retry_config(RetryConfig::disabled())
            .timeout_config(
                TimeoutConfig::builder()
                    .connect_timeout(options.attempt_timeout.min(Duration::from_secs(3)))
                    .operation_attempt_timeout(options.attempt_timeout)
                    .build(),
            );
        if let Some(endpoint) = &options.endpoint {
            loader = loader.endpoint_url(endpoint);
        }
        if let Some((key, secret)) = &options.static_credentials {
            loader = loader.credentials_provider(aws_sdk_ec2::config::Credentials::new(
                key,
                secret,
                None,
                None,
                "ferrule-ipamd-static",
            ));
        }
        let config = loader.load().await;
        Ec2 {
            client: aws_sdk_ec2::Client::new(&config),
            metrics,
            options,
        }
    }

    /// Runs `call` until it succeeds, fails with an error not worth retrying, or has
    /// used its attempts; counts each attempt.
    async fn retry<T, E, F, Fut>(&self, operation: &'static str, call: F) -> Result<T, Ec2Error>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, SdkError<E, HttpResponse>>>,
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    {
        let mut attempt = 0;
        loop {
            attempt += 1;
            match call().await {
                Ok(value) => {
                    self.metrics.ec2_call(operation, "ok");
                    return Ok(value);
                }
                Err(err) => {
                    let failure = classify(&err);
                    self.metrics.ec2_call(operation, failure.outcome);
                    self.metrics.ec2_error(operation, &failure.code);
                    if !failure.retryable || attempt >= self.options.max_attempts {
                        tracing::warn!(operation, attempt, code = %failure.code, "EC2 call failed: {}", failure.message);
                        return Err(Ec2Error {
                            operation,
                            code: failure.code,
                            message: failure.message,
                            retryable: failure.retryable,
                            attempts: attempt,
                        });
                    }
                    let delay = self.backoff(attempt);
                    tracing::info!(operation, attempt, code = %failure.code, ?delay, "EC2 call failed, retrying");
                    tokio::time::sleep(delay).await;
                }
            }
        }
    }

    /// The wait before attempt `attempt + 1`: a random time up to base·2^(attempt−1),
    /// capped.
    fn backoff(&self, attempt: u32) -> Duration {
        let ceiling = self
            .options
            .backoff_base
            .saturating_mul(1 << attempt.saturating_sub(1).min(16))
            .min(self.options.backoff_max);
        let ms = ceiling.as_millis() as u64;
        Duration::from_millis(rand::thread_rng().gen_range(ms / 2..=ms.max(1)))
    }

    /// The instance's type, subnet and VPC.
    pub async fn describe_instance(&self, instance_id: &str) -> Result<InstanceDesc, Ec2Error> {
        let out = self
            .retry("DescribeInstances", || {
                self.client
                    .describe_instances()
                    .instance_ids(instance_id)
                    .send()
            })
            .await?;
        let instance = out
            .reservations()
            .iter()
            .flat_map(|r| r.instances())
            .next()
            .ok_or_else(|| not_found("DescribeInstances", format!("instance {instance_id}")))?;
        Ok(InstanceDesc {
            instance_type: instance
                .instance_type()
                .map(|t| t.as_str().to_string())
                .unwrap_or_default(),
            subnet_id: instance.subnet_id().unwrap_or_default().to_string(),
            vpc_id: instance.vpc_id().unwrap_or_default().to_string(),
        })
    }

    /// (MaximumNetworkInterfaces, Ipv4AddressesPerInterface) of `instance_type`, when
    /// EC2 says.
    pub async fn instance_type_limits(
        &self,
        instance_type: &str,
    ) -> Result<Option<(u32, u32)>, Ec2Error> {
        let out = self
            .retry("DescribeInstanceTypes", || {
                self.client
                    .describe_instance_types()
                    .instance_types(InstanceType::from(instance_type))
                    .send()
            })
            .await?;
        Ok(out.instance_types().iter().find_map(|t| {
            let info = t.network_info()?;
            let n = u32::try_from(info.maximum_network_interfaces()?).ok()?;
            let m = u32::try_from(info.ipv4_addresses_per_interface()?).ok()?;
            (n > 0 && m > 0).then_some((n, m))
        }))
    }

    /// The subnet's CIDR, free addresses and VPC.
    pub async fn describe_subnet(&self, subnet_id: &str) -> Result<SubnetDesc, Ec2Error> {
        let out = self
            .retry("DescribeSubnets", || {
                self.client.describe_subnets().subnet_ids(subnet_id).send()
            })
            .await?;
        let subnet = out
            .subnets()
            .first()
            .ok_or_else(|| not_found("DescribeSubnets", format!("subnet {subnet_id}")))?;
        Ok(SubnetDesc {
            cidr: subnet.cidr_block().unwrap_or_default().to_string(),
            available_ips: subnet
                .available_ip_address_count()
                .and_then(|n| u32::try_from(n).ok())
                .unwrap_or(0),
            vpc_id: subnet.vpc_id().unwrap_or_default().to_string(),
        })
    }

    /// The VPC's IPv4 CIDRs (associated ones).
    pub async fn vpc_cidrs(&self, vpc_id: &str) -> Result<Vec<String>, Ec2Error> {
        let out = self
            .retry("DescribeVpcs", || {
                self.client.describe_vpcs().vpc_ids(vpc_id).send()
            })
            .await?;
        let mut cidrs = Vec::new();
        for vpc in out.vpcs() {
            for assoc in vpc.cidr_block_association_set() {
                let state = assoc
                    .cidr_block_state()
                    .and_then(|s| s.state())
                    .map(|s| s.as_str().to_string());
                if matches!(state.as_deref(), None | Some("associated")) {
                    if let Some(cidr) = assoc.cidr_block() {
                        cidrs.push(cidr.to_string());
                    }
                }
            }
            if cidrs.is_empty() {
                cidrs.extend(vpc.cidr_block().map(str::to_string));
            }
        }
        Ok(cidrs)
    }

    async fn describe_enis(
        &self,
        filters: Vec<Filter>,
        ids: Vec<String>,
    ) -> Result<Vec<EniDesc>, Ec2Error> {
        let mut enis = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let out = self
                .retry("DescribeNetworkInterfaces", || {
                    let mut req = self
                        .client
                        .describe_network_interfaces()
                        .set_next_token(token.clone());
                    if ids.is_empty() {
                        req = req.set_filters(Some(filters.clone()));
                    } else {
                        req = req.set_network_interface_ids(Some(ids.clone()));
                    }
                    req.send()
                })
                .await?;
            enis.extend(out.network_interfaces().iter().map(eni_desc));
            match out.next_token() {
                Some(next) if !next.is_empty() && ids.is_empty() => token = Some(next.to_string()),
                _ => break,
            }
        }
        Ok(enis)
    }

    /// The ENIs attached to `instance_id`.
    pub async fn instance_enis(&self, instance_id: &str) -> Result<Vec<EniDesc>, Ec2Error> {
        self.describe_enis(
            vec![filter("attachment.instance-id", instance_id)],
            Vec::new(),
        )
        .await
    }

    /// One ENI, or `None` when EC2 does not know it.
    pub async fn eni(&self, eni_id: &str) -> Result<Option<EniDesc>, Ec2Error> {
        match self
            .describe_enis(Vec::new(), vec![eni_id.to_string()])
            .await
        {
            Ok(enis) => Ok(enis.into_iter().next()),
            Err(e) if e.code.contains("NotFound") => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// ENIs tagged with the cluster (and, if given, the instance) that are attached
    /// nowhere.
    pub async fn leaked_enis(
        &self,
        cluster: &str,
        instance_id: Option<&str>,
    ) -> Result<Vec<EniDesc>, Ec2Error> {
        let mut filters = vec![
            filter(&format!("tag:{CLUSTER_TAG}"), cluster),
            filter("status", "available"),
        ];
        if let Some(id) = instance_id {
            filters.push(filter(&format!("tag:{INSTANCE_TAG}"), id));
        }
        let enis = self.describe_enis(filters, Vec::new()).await?;
        // Filter again: an emulator may ignore a filter.
        Ok(enis
            .into_iter()
            .filter(|e| {
                e.status == "available"
                    && e.tag(CLUSTER_TAG) == Some(cluster)
                    && instance_id.is_none_or(|id| e.tag(INSTANCE_TAG) == Some(id))
            })
            .collect())
    }

    /// Creates an ENI in `subnet_id` with `groups`, tagged with the cluster and
    /// instance; returns its ID.
    pub async fn create_eni(
        &self,
        subnet_id: &str,
        groups: &[String],
        cluster: &str,
        instance_id: &str,
    ) -> Result<String, Ec2Error> {
        let tags = TagSpecification::builder()
            .resource_type(ResourceType::NetworkInterface)
            .tags(Tag::builder().key(CLUSTER_TAG).value(cluster).build())
            .tags(Tag::builder().key(INSTANCE_TAG).value(instance_id).build())
            .tags(
                Tag::builder()
                    .key(CREATED_TAG)
                    .value((crate::manager::now_ms() / 1000).to_string())
                    .build(),
            )
            .build();
        let out = self
            .retry("CreateNetworkInterface", || {
                self.client
                    .create_network_interface()
                    .subnet_id(subnet_id)
                    .set_groups(Some(groups.to_vec()))
                    .description(format!("ferrule-ipamd {cluster} {instance_id}"))
                    .tag_specifications(tags.clone())
                    .send()
            })
            .await?;
        out.network_interface()
            .and_then(|e| e.network_interface_id())
            .map(str::to_string)
            .ok_or_else(|| not_found("CreateNetworkInterface", "no ENI ID in the reply".into()))
    }

    /// Attaches `eni_id` to `instance_id` at `device_index`; returns the attachment ID.
    pub async fn attach_eni(
        &self,
        eni_id: &str,
        instance_id: &str,
        device_index: u32,
    ) -> Result<String, Ec2Error> {
        let out = self
            .retry("AttachNetworkInterface", || {
                self.client
                    .attach_network_interface()
                    .network_interface_id(eni_id)
                    .instance_id(instance_id)
                    .device_index(device_index as i32)
                    .send()
            })
            .await?;
        out.attachment_id()
            .map(str::to_string)
            .ok_or_else(|| not_found("AttachNetworkInterface", "no attachment ID".into()))
    }

    /// Marks the attachment delete-on-termination.
    pub async fn set_delete_on_termination(
        &self,
        eni_id: &str,
        attachment_id: &str,
    ) -> Result<(), Ec2Error> {
        let change = NetworkInterfaceAttachmentChanges::builder()
            .attachment_id(attachment_id)
            .delete_on_termination(true)
            .build();
        self.retry("ModifyNetworkInterfaceAttribute", || {
            self.client
                .modify_network_interface_attribute()
                .network_interface_id(eni_id)
                .attachment(change.clone())
                .send()
        })
        .await?;
        Ok(())
    }

    /// Asks EC2 for `count` more secondary addresses on `eni_id`.
    pub async fn assign_ips(&self, eni_id: &str, count: u32) -> Result<(), Ec2Error> {
        self.retry("AssignPrivateIpAddresses", || {
            self.client
                .assign_private_ip_addresses()
                .network_interface_id(eni_id)
                .secondary_private_ip_address_count(count as i32)
                .send()
        })
        .await?;
        Ok(())
    }

    /// Gives `ips` of `eni_id` back to the subnet.
    pub async fn unassign_ips(&self, eni_id: &str, ips: &[Ipv4Addr]) -> Result<(), Ec2Error> {
        let ips: Vec<String> = ips.iter().map(ToString::to_string).collect();
        self.retry("UnassignPrivateIpAddresses", || {
            self.client
                .unassign_private_ip_addresses()
                .network_interface_id(eni_id)
                .set_private_ip_addresses(Some(ips.clone()))
                .send()
        })
        .await?;
        Ok(())
    }

    /// Detaches an attachment.
    pub async fn detach_eni(&self, attachment_id: &str) -> Result<(), Ec2Error> {
        self.retry("DetachNetworkInterface", || {
            self.client
                .detach_network_interface()
                .attachment_id(attachment_id)
                .send()
        })
        .await?;
        Ok(())
    }

    /// Deletes an ENI; one EC2 no longer knows counts as deleted.
    pub async fn delete_eni(&self, eni_id: &str) -> Result<(), Ec2Error> {
        match self
            .retry("DeleteNetworkInterface", || {
                self.client
                    .delete_network_interface()
                    .network_interface_id(eni_id)
                    .send()
            })
            .await
        {
            Err(e) if e.code.contains("NotFound") => Ok(()),
            other => other.map(|_| ()),
        }
    }
}

fn filter(name: &str, value: &str) -> Filter {
    Filter::builder().name(name).values(value).build()
}

fn not_found(operation: &'static str, what: String) -> Ec2Error {
    Ec2Error {
        operation,
        code: "NotFound".to_string(),
        message: format!("{what} not found"),
        retryable: false,
        attempts: 1,
    }
}

fn eni_desc(eni: &NetworkInterface) -> EniDesc {
    let attachment = eni.attachment();
    let mut primary_ip = None;
    let mut secondary_ips = Vec::new();
    for addr in eni.private_ip_addresses() {
        let Some(ip) = addr.private_ip_address().and_then(|s| s.parse().ok()) else {
            continue;
        };
        if addr.primary().unwrap_or(false) {
            primary_ip = Some(ip);
        } else {
            secondary_ips.push(ip);
        }
    }
    if primary_ip.is_none() {
        primary_ip = eni.private_ip_address().and_then(|s| s.parse().ok());
        secondary_ips.retain(|ip| Some(*ip) != primary_ip);
    }
    secondary_ips.sort_unstable();
    EniDesc {
        id: eni.network_interface_id().unwrap_or_default().to_string(),
        mac: eni.mac_address().unwrap_or_default().to_string(),
        status: eni
            .status()
            .map(|s| s.as_str().to_string())
            .unwrap_or_default(),
        device_index: attachment
            .and_then(|a| a.device_index())
            .and_then(|i| u32::try_from(i).ok()),
        attachment_id: attachment
            .and_then(|a| a.attachment_id())
            .map(str::to_string),
        attachment_status: attachment
            .and_then(|a| a.status())
            .map(|s| s.as_str().to_string()),
        instance_id: attachment.and_then(|a| a.instance_id()).map(str::to_string),
        subnet_id: eni.subnet_id().unwrap_or_default().to_string(),
        vpc_id: eni.vpc_id().unwrap_or_default().to_string(),
        primary_ip,
        secondary_ips,
        security_groups: eni
            .groups()
            .iter()
            .filter_map(|g| g.group_id().map(str::to_string))
            .collect(),
        tags: eni
            .tag_set()
            .iter()
            .filter_map(|t| Some((t.key()?.to_string(), t.value()?.to_string())))
            .collect(),
    }
}
