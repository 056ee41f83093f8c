"""Puts a secret into a Secrets Manager endpoint (moto's server in the tests), as an
operator would with the AWS CLI.

usage: secretsmanager.py ENDPOINT NAME SECRET_STRING
"""

import sys

import boto3

endpoint, name, value = sys.argv[1:4]
client = boto3.client(
    "secretsmanager",
    endpoint_url=endpoint,
    region_name="us-east-1",
    aws_access_key_id="testing",
    aws_secret_access_key="testing",
)
client.create_secret(Name=name, SecretString=value)
