"""Prints AWS MSK IAM tokens made by the official signer (aws-msk-iam-sasl-signer-python) for
fixed credentials and a fixed signing time, as the vectors of consumer/src/msk_iam.rs's tests.

    python3 -m venv /tmp/signer && /tmp/signer/bin/pip install aws-msk-iam-sasl-signer-python==1.0.2
    /tmp/signer/bin/python tests/python/msk_iam_token.py

Each line: region, access key, secret key, session token (or -), time, token, expiry (ms).
"""

import datetime
from unittest import mock

import botocore.auth
from botocore.credentials import Credentials

from aws_msk_iam_sasl_signer import MSKAuthTokenProvider as signer

CASES = [
    ("us-east-1", "AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", None,
     datetime.datetime(2024, 5, 1, 13, 0, 0)),
    ("eu-west-1", "ASIAEXAMPLE", "secret/with+special=chars", "IQoJb3JpZ2luX2VjE//token+/=",
     datetime.datetime(2025, 12, 31, 23, 59, 59)),
]


def main():
    for region, key, secret, token, at in CASES:
        creds = Credentials(key, secret, token)
        with mock.patch.object(signer, "__load_default_credentials__", return_value=creds), \
                mock.patch.object(botocore.auth, "get_current_datetime", return_value=at):
            value, expiry_ms = signer.generate_auth_token(region)
        print("\t".join([region, key, secret, token or "-", at.isoformat(), value, str(expiry_ms)]))


if __name__ == "__main__":
    main()
