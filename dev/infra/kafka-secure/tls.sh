#!/bin/sh
# A throwaway CA and a server certificate signed by it, all PEM, for the secure Kafka broker
# (dev/stack, docker-compose.yml) and the tests' own TLS endpoints. Idempotent.
#   tls.sh DIR [SAN...]     SANs default to DNS:localhost IP:127.0.0.1
# DIR gets ca.pem (what clients trust), server-key.pem and server-cert.pem (a TLS server's
# key and certificate), and server-keystore.pem (key, certificate and CA in one file, Kafka's
# ssl.keystore.type=PEM). The CA's key is kept only to sign; nothing here is a real secret.
set -eu
dir=$1; shift
san=${*:-DNS:localhost IP:127.0.0.1}
mkdir -p "$dir"
cd "$dir"
[ -s server-keystore.pem ] && exit 0
rm -f ./*.pem ./*.csr ./*.srl ./*.ext
openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=lakesink test CA" \
  -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign \
  -keyout ca-key.pem -out ca.pem 2>/dev/null
openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" -keyout server-key.pem -out server.csr 2>/dev/null
printf 'subjectAltName=%s\nbasicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n' \
  "$(echo "$san" | tr ' ' ',')" >server.ext
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 3650 \
  -extfile server.ext -out server-cert.pem 2>/dev/null
cat server-key.pem server-cert.pem ca.pem >server-keystore.pem.tmp
mv server-keystore.pem.tmp server-keystore.pem
rm -f server.csr server.ext ca.srl
