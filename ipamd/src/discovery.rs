//! Where the node is: its instance ID and region from the settings, else from the
//! instance metadata service (aws-config's IMDS client, which honours
//! AWS_EC2_METADATA_SERVICE_ENDPOINT and AWS_EC2_METADATA_DISABLED).

use aws_config::imds;

/// Why the instance or region could not be found.
#[derive(Debug, thiserror::Error)]
#[error("cannot learn the {what} from the instance metadata service ({source}); pass --{flag} (or set {env})")]
pub struct DiscoveryError {
    what: &'static str,
    flag: &'static str,
    env: &'static str,
    #[source]
    source: imds::client::error::ImdsError,
}

/// The instance ID and region: each given one as is, the others from IMDS.
pub async fn instance_and_region(
    instance_id: Option<String>,
    region: Option<String>,
) -> Result<(String, String), DiscoveryError> {
    if let (Some(id), Some(region)) = (&instance_id, &region) {
        return Ok((id.clone(), region.clone()));
    }
    let client = imds::Client::builder().build();
    let id = match instance_id {
        Some(id) => id,
        None => client
            .get("/latest/meta-data/instance-id")
            .await
            .map_err(|source| DiscoveryError {
                what: "instance ID",
                flag: "instance-id",
                env: "FERRULE_INSTANCE_ID",
                source,
            })?
            .as_ref()
            .trim()
            .to_string(),
    };
    let region = match region {
        Some(region) => region,
        None => client
            .get("/latest/meta-data/placement/region")
            .await
            .map_err(|source| DiscoveryError {
                what: "region",
                flag: "region",
                env: "AWS_REGION",
                source,
            })?
            .as_ref()
            .trim()
            .to_string(),
    };
    Ok((id, region))
}
