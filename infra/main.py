"""CDK Terrain entry point: `cdktn synth`, `cdktn diff <stack>`, `cdktn deploy <stack>` run it.

The fleet spec is ../fleet.yaml unless MERIDIAN_FLEET names another;
MERIDIAN_BACKEND=local keeps Terraform state in infra/.state/ instead of the
spec's GCS bucket. The CLI sets CDKTF_OUTDIR.
"""

from meridian_infra.synth import synth_from_env

if __name__ == "__main__":
    raise SystemExit(synth_from_env())
