import Foundation
import Logging
import NIOConcurrencyHelpers
import RealtimeTesting
import SpreadbotClient
import Testing

/// A configuration for a client of `server` (or of a proxy in front of it at `baseURL`), with the
/// server's credentials, loopback reachability and short delays so tests run quickly.
func spreadbotConfiguration(_ server: SpreadbotTestServer, baseURL: String? = nil, runtime: RealtimeRuntime = .shared) -> SpreadbotConfiguration {
    var configuration = SpreadbotConfiguration(
        baseURL: baseURL ?? server.baseURL, authURL: server.authURL, accessToken: server.options.accessToken,
        refreshToken: server.options.refreshToken, base64Credentials: server.options.base64Credentials, runtime: runtime)
    configuration.reachability = AlwaysReachable()
    configuration.reconnectDelay = .milliseconds(50)
    configuration.maxReconnectDelay = .milliseconds(200)
    configuration.retryDelay = .milliseconds(50)
    configuration.pollInterval = .milliseconds(100)
    // The full suite starts every suite at once on two cores, where opening a loopback WebSocket
    // has taken over 5 s (the default): the client then fell back to SSE, which a test that
    // expects the WebSocket misreads. Tests of the timeout itself set their own.
    configuration.requestTimeout = .seconds(30)
    return configuration
}

/// Polls `condition` every 10 ms until it holds, or fails the test after `limit`.
func eventually(
    _ what: @autoclosure () -> String, limit: Duration = .seconds(30), sourceLocation: SourceLocation = #_sourceLocation,
    _ condition: () async throws -> Bool
) async rethrows {
    let start = ContinuousClock.now
    while try await !condition() {
        if ContinuousClock.now - start > limit {
            Issue.record("timed out after \(limit) waiting for: \(what())", sourceLocation: sourceLocation)
            return
        }
        try? await Task.sleep(for: .milliseconds(10))  // async conditions: waitUntil takes only synchronous ones
    }
}

/// Collects what a client hands to its callbacks.
final class Recorder: Sendable {
    private let box = NIOLockedValueBox<(messages: [SpreadbotMessage], errors: [String], opens: Int, tokens: [SpreadbotTokens])>(([], [], 0, []))

    init(_ client: Spreadbot) {
        client.onOpen { [self] in box.withLockedValue { $0.opens += 1 } }
        client.onError { [self] error in box.withLockedValue { $0.errors.append(String(describing: error)) } }
        client.onMessage { [self] id, event, data in
            box.withLockedValue { $0.messages.append(SpreadbotMessage(id: id, event: event, data: data, transport: client.transport ?? .polling)) }
        }
        client.onTokensRefreshed { [self] tokens in box.withLockedValue { $0.tokens.append(tokens) } }
    }

    var messages: [SpreadbotMessage] { box.withLockedValue { $0.messages } }
    var texts: [String] { messages.compactMap { $0.data.string } }
    var errors: [String] { box.withLockedValue { $0.errors } }
    var opens: Int { box.withLockedValue { $0.opens } }
    var tokens: [SpreadbotTokens] { box.withLockedValue { $0.tokens } }
}
