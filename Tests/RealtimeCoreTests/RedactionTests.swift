@testable import RealtimeCore
import NIOHTTP1
import Testing

@Suite struct RedactionTests {
    @Test(arguments: [
        ("https://api.example.com/hub?access_token=SECRET123&x=1", "https://api.example.com/hub?access_token=<redacted>&x=<redacted>"),
        // Protocol parameters stay readable; connection tokens and keys do not.
        ("https://h/hub/negotiate?negotiateVersion=1&id=CONNTOKEN", "https://h/hub/negotiate?negotiateVersion=1&id=<redacted>"),
        ("http://h/socket.io/?EIO=4&transport=polling&sid=S1&api_key=K", "http://h/socket.io/?EIO=4&transport=polling&sid=<redacted>&api_key=<redacted>"),
        // Spreadbot's cursor and a poll's cache-buster are no secrets; SignalR's connection token is.
        ("https://h/room?since=42", "https://h/room?since=42"),
        ("https://h/hub?id=TOKEN&_=1733000000000", "https://h/hub?id=<redacted>&_=1733000000000"),
        ("https://s3/x?X-Amz-Signature=abc&X-Amz-Credential=c", "https://s3/x?X-Amz-Signature=<redacted>&X-Amz-Credential=<redacted>"),
        ("wss://user:SECRET123@host:8443/ws", "wss://<redacted>@host:8443/ws"),
        ("http://host/path", "http://host/path"),
        ("http://host/p?token=SECRET123#frag", "http://host/p?token=<redacted>#<redacted>"),
    ])
    func urlsLoseCredentials(input: String, expected: String) {
        #expect(Redaction.url(input) == expected)
    }

    @Test func errorDescriptionsNeverContainTheToken() {
        let error = RealtimeError.badStatus(.unauthorized, url: "https://h/negotiate?access_token=SECRET123")
        #expect(!error.description.contains("SECRET123"))
        #expect(error.status == .unauthorized)
        let wrapped = RealtimeError(.connectFailed, "failed", underlying: RealtimeError.invalidURL("wss://u:SECRET123@h/?t=SECRET123"))
        #expect(!wrapped.description.contains("SECRET123"))
        #expect(!"\(wrapped)".contains("SECRET123"))
    }

    @Test func serverMessageIsTruncated() {
        let error = RealtimeError(.badStatus, "x", serverMessage: String(repeating: "a", count: 5000))
        #expect(error.serverMessage?.count == 512)
    }
}
