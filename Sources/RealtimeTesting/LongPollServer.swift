import DequeModule
import NIOConcurrencyHelpers
import NIOCore
public import NIOSSL

/// A long-polling endpoint on loopback: `GET /poll` waits up to `holdTime` for messages the test
/// pushed and answers them one per line (an empty body when none came); `POST /poll` records the body.
/// `GET` with a `fail` query answers 500, for error tests.
public final class LongPollServer: Sendable {
    private struct State {
        var outbox: Deque<String> = []
        var waiters: [CheckedContinuation<Void, Never>] = []
        var received: [String] = []
    }
    private let state = NIOLockedValueBox(State())
    /// The HTTP server underneath, for its request log and other routes.
    public let http: ScriptedHTTPServer
    /// How long a poll waits for a message before answering empty.
    public let holdTime: Duration

    private init(http: ScriptedHTTPServer, holdTime: Duration) {
        self.http = http
        self.holdTime = holdTime
    }

    /// Starts a server on 127.0.0.1 with an ephemeral port (`tls`: HTTPS).
    public static func start(holdTime: Duration = .seconds(2), tls: TLSConfiguration? = nil) async throws -> LongPollServer {
        let server = LongPollServer(http: try await ScriptedHTTPServer.start(tls: tls), holdTime: holdTime)
        server.http.route("/poll") { [weak server] request in
            guard let server else { return ScriptedResponse(status: 503) }
            if request.method == "POST" {
                server.state.withLockedValue { $0.received.append(String(buffer: request.body)) }
                return .text("ok")
            }
            if request.query?.contains("fail") == true { return .text("failing on purpose", status: 500) }
            return .text(await server.takeMessages())
        }
        return server
    }

    /// The URL to poll.
    public var url: String { http.baseURL + "/poll" }

    /// Queues a message for the next poll.
    public func push(_ message: String) {
        let waiters = state.withLockedValue { state -> [CheckedContinuation<Void, Never>] in
            state.outbox.append(message)
            defer { state.waiters.removeAll() }
            return state.waiters
        }
        for waiter in waiters { waiter.resume() }
    }

    /// Bodies the client posted, oldest first.
    public var received: [String] { state.withLockedValue { $0.received } }

    /// Stops the server and closes its connections; waits until they are closed.
    public func stop() async {
        let waiters = state.withLockedValue { state -> [CheckedContinuation<Void, Never>] in
            defer { state.waiters.removeAll() }
            return state.waiters
        }
        for waiter in waiters { waiter.resume() }
        await http.stop()
    }

    private func takeMessages() async -> String {
        if let ready = drain() { return ready }
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                await withCheckedContinuation { continuation in
                    let resumeNow = self.state.withLockedValue { state -> Bool in
                        if !state.outbox.isEmpty { return true }
                        state.waiters.append(continuation)
                        return false
                    }
                    if resumeNow { continuation.resume() }
                }
            }
            group.addTask { try? await Task.sleep(for: self.holdTime) }
            await group.next()
            group.cancelAll()
            // Wake our own waiter if the timer won, so the group can finish.
            let waiters = self.state.withLockedValue { state -> [CheckedContinuation<Void, Never>] in
                defer { state.waiters.removeAll() }
                return state.waiters
            }
            for waiter in waiters { waiter.resume() }
        }
        return drain() ?? ""
    }

    private func drain() -> String? {
        state.withLockedValue { state in
            guard !state.outbox.isEmpty else { return nil }
            defer { state.outbox.removeAll() }
            return state.outbox.joined(separator: "\n")
        }
    }
}
