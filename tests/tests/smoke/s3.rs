use bytes::Bytes;
use futures::TryStreamExt;
use lakesink_tests::{Stack, unique, unreachable};
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

const MIB: usize = 1024 * 1024;

fn store(stack: &Stack) -> AmazonS3 {
    AmazonS3Builder::new()
        .with_endpoint(&stack.s3_endpoint)
        .with_allow_http(true)
        .with_bucket_name(&stack.s3_bucket)
        .with_region(&stack.s3_region)
        .with_access_key_id(&stack.s3_access_key_id)
        .with_secret_access_key(&stack.s3_secret_access_key)
        .build()
        .expect("s3 store")
}

#[tokio::test]
async fn put_list_get_and_multipart() {
    let stack = Stack::from_env();
    let s3 = store(&stack);
    let prefix = Path::from(unique("smoke-s3"));

    let small = prefix.clone().join("small.txt");
    s3.put(&small, PutPayload::from_static(b"hello lakesink"))
        .await
        .unwrap_or_else(|e| panic!("{}", unreachable("S3 (SeaweedFS)", &stack.s3_endpoint, e)));

    // Two 5 MiB parts (S3's minimum for a non-last part) and a short last part.
    let parts: Vec<Bytes> = (0..3u8)
        .map(|i| Bytes::from(vec![b'a' + i; if i < 2 { 5 * MIB } else { 1234 }]))
        .collect();
    let big = prefix.clone().join("big.bin");
    let mut upload = s3
        .put_multipart(&big)
        .await
        .expect("create multipart upload");
    for part in &parts {
        upload
            .put_part(PutPayload::from(part.clone()))
            .await
            .expect("upload part");
    }
    upload.complete().await.expect("complete multipart upload");

    let mut listed: Vec<(String, u64)> = s3
        .list(Some(&prefix))
        .map_ok(|m| (m.location.to_string(), m.size))
        .try_collect()
        .await
        .expect("list");
    listed.sort();
    let total: usize = parts.iter().map(Bytes::len).sum();
    assert_eq!(
        listed,
        vec![(big.to_string(), total as u64), (small.to_string(), 14),]
    );

    let got = s3
        .get(&small)
        .await
        .expect("get")
        .bytes()
        .await
        .expect("body");
    assert_eq!(&got[..], b"hello lakesink");
    let got = s3
        .get(&big)
        .await
        .expect("get")
        .bytes()
        .await
        .expect("body");
    assert_eq!(got, parts.concat());
    // A multipart object's ETag is md5-of-md5s with the part count: proof it was multipart.
    let meta = s3.head(&big).await.expect("head");
    let etag = meta.e_tag.expect("etag");
    assert!(etag.trim_matches('"').ends_with("-3"), "etag {etag}");

    for p in [&small, &big] {
        s3.delete(p).await.expect("delete");
    }
}
