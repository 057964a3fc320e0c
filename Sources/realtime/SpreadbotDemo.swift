import Foundation
import NIOConcurrencyHelpers
import NIOHTTP1
import RealtimeCore
import RealtimeTesting
import SpreadbotClient

/// The Spreadbot client's part of the demo, against the in-process SpreadbotTestServer.
enum SpreadbotDemo {
    static let steps: [(String, @Sendable () async throws -> Void)] = [
        ("Spreadbot: WebSocket refused -> Server-Sent Events, send and receive, token expiry -> one refresh, REST GET", exchange),
    ]

    static func exchange() async throws {
        let server = try await SpreadbotTestServer.start()
        DemoCleanup.after { await server.stop() }
        server.refuseWebSocket()
        server.setResource("/account", json: #"{"plan":"demo","messages":2}"#)
        var configuration = SpreadbotConfiguration(
            baseURL: server.baseURL, authURL: server.authURL, accessToken: server.options.accessToken,
            refreshToken: server.options.refreshToken, base64Credentials: server.options.base64Credentials)
        configuration.reconnectDelay = .milliseconds(100)
        let client = Spreadbot(configuration: configuration)
        let received = AsyncStream.makeStream(of: String.self)
        client.onMessage { id, event, data in received.continuation.yield("id \(id), event \(event), data \"\(data)\"") }
        client.onError { error in say("   onError: \(error)") }
        client.onTokensRefreshed { tokens in say("   tokens refreshed: \(tokens)") }
        let connected = AsyncStream.makeStream(of: SpreadbotTransport.self)
        client.onOpen { connected.continuation.yield(client.transport ?? .polling) }
        client.establishConnection(path: "demo")
        var opens = connected.stream.makeAsyncIterator()
        guard let first = await opens.next() else { throw RealtimeError(.connectFailed, "the stream did not open") }
        say("   connected over \(first) (the server refuses WebSocket upgrades)")
        try await client.send("hello from swift-realtime")
        say("   sent over \(first): the server has \(server.received(on: "demo"))")
        server.publish("first update", to: "demo")
        var messages = received.stream.makeAsyncIterator()
        say("   received: \(await messages.next() ?? "?")")

        server.expireTokens()
        server.dropStreams()
        say("   the server expired the access token and dropped the stream")
        let account = try await client.rest.getData(path: "account")
        say("   REST GET /account: \(account.status.code) \(account.text ?? "")")
        guard let second = await opens.next() else { throw RealtimeError(.connectFailed, "the stream did not reopen") }
        say("   reconnected over \(second); token refreshes: \(server.refreshCount) (shared by the stream and the REST call)")
        server.publish("after the refresh", to: "demo")
        say("   received: \(await messages.next() ?? "?")")
        say("   requests the server saw: \(server.requestLog.joined(separator: ", "))")
        client.closeConnection()
        guard server.refreshCount == 1 else { throw RealtimeError(.protocolViolation, "expected one token refresh, saw \(server.refreshCount)") }
    }
}
