import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOHTTP1
import RealtimeTesting
import SpreadbotClient
import Testing

/// Token refresh (RFC 6749 section 6) and the REST rules: retries with exponential delay on the
/// manual clock, 4xx at once, the offline queue, callbacks on the main actor.
@Suite(.timeLimit(.minutes(3)))
struct SpreadbotAuthAndRESTTests {
    /// Tokens expire while the stream is up: the stream's reconnect and five concurrent REST
    /// requests all hit 401, and exactly one refresh serves them all.
    @Test func tokenExpiryMidStreamRefreshesOnceForConcurrentRequests() async throws {
        let server = try await SpreadbotTestServer.start()
        defer { Task { await server.stop() } }
        server.setResource("/profile", json: #"{"name":"ada"}"#)
        let client = Spreadbot(configuration: spreadbotConfiguration(server))
        let recorder = Recorder(client)
        client.establishConnection(path: "chat")
        await eventually("connected") { client.state == .connected }

        server.expireTokens()
        server.dropStreams()
        let results = try await withThrowingTaskGroup(of: SpreadbotResponse.self) { group in
            for _ in 0..<5 { group.addTask { try await client.rest.getData(path: "profile") } }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        #expect(results.count == 5)
        #expect(try results.allSatisfy { try $0.json()["name"] == "ada" })
        await eventually("the stream is back") { client.state == .connected && recorder.opens == 2 }
        #expect(server.refreshCount == 1)
        #expect(client.tokens.accessToken == "access-1")
        #expect(client.rest.tokens.refreshToken == "refresh-1")
        #expect(recorder.tokens.map(\.accessToken) == ["access-1"])
        #expect(recorder.tokens.first?.expiresIn == 3600)
        #expect(server.requestLog.contains("GET /profile 401"))
        server.publish("after refresh", to: "chat")
        await eventually("a message after the refresh") { recorder.texts == ["after refresh"] }
        client.closeConnection()
    }

    /// A refused refresh is a typed `authenticationFailed`, tried once per request, never in a loop;
    /// the stream stops with it instead of reconnecting.
    @Test func failedRefreshIsATypedErrorNotALoop() async throws {
        let server = try await SpreadbotTestServer.start()
        defer { Task { await server.stop() } }
        server.expireTokens()
        server.failRefresh()
        let rest = SpreadbotREST(configuration: spreadbotConfiguration(server))
        let error = await #expect(throws: RealtimeError.self) { try await rest.getData(path: "anything") }
        #expect(error?.code == .authenticationFailed)
        #expect(error?.status == .badRequest)
        #expect(error?.serverMessage == "invalid_grant")
        #expect(server.refreshCount == 1)

        let client = Spreadbot(configuration: spreadbotConfiguration(server))
        client.establishConnection(path: "stream")
        await client.waitUntilClosed()
        #expect(client.state == .disconnected)
        #expect(client.lastError?.code == .authenticationFailed)
        #expect(server.refreshCount == 2)
        // WebSocket refused (400: Hummingbird's answer to any refused upgrade), SSE 401, the refresh
        // fails: the client stops there instead of falling back to polling or reconnecting.
        #expect(server.requestLog.suffix(3) == ["GET /stream ws 400 (unauthorized)", "GET /stream sse 401", "POST /oauth/token 400"])
    }

    /// Without authURL a 401 fails at once with authenticationFailed, with no refresh request.
    @Test func unauthorizedWithoutRefreshConfigured() async throws {
        let server = try await SpreadbotTestServer.start()
        defer { Task { await server.stop() } }
        var configuration = spreadbotConfiguration(server)
        configuration.authURL = nil
        configuration.accessToken = "wrong"
        let error = await #expect(throws: RealtimeError.self) { try await SpreadbotREST(configuration: configuration).getData(path: "x") }
        #expect(error?.code == .authenticationFailed)
        #expect(server.refreshCount == 0)
    }

    /// Neither logs (with `log: true`, at trace level) nor error descriptions show tokens or
    /// credentials, in text or in hex.
    @Test func tokensAndCredentialsNeverAppearInLogsOrErrors() async throws {
        let server = try await SpreadbotTestServer.start()
        defer { Task { await server.stop() } }
        let lines = NIOLockedValueBox<[String]>([])
        let logger = Logger(label: "spreadbot-test") { _ in CapturingLogHandler(lines: lines) }
        var configuration = spreadbotConfiguration(server, runtime: RealtimeRuntime.shared.logging(to: logger))
        configuration.log = true
        let client = Spreadbot(configuration: configuration)
        let recorder = Recorder(client)
        client.establishConnection(path: "secret")
        await eventually("connected") { client.state == .connected }
        server.expireTokens()
        _ = try await client.rest.getData(path: "secret")  // refresh succeeds: access-1
        server.expireTokens()
        server.failRefresh()
        let error = await #expect(throws: RealtimeError.self) { try await client.rest.getData(path: "secret") }
        server.dropStreams()
        await client.waitUntilClosed()
        let secrets = ["access-0", "access-1", "refresh-0", "refresh-1", server.options.base64Credentials]
        let texts = lines.withLockedValue { $0 } + recorder.errors + [String(describing: error), "\(configuration)", "\(client.tokens)"]
        #expect(!lines.withLockedValue { $0 }.isEmpty)
        // In text, and as the hex that the libraries underneath print bytes in (AsyncHTTPClient's
        // trace lines showed the token endpoint's reply that way before they were capped at debug).
        let forms = secrets.flatMap { secret -> [String] in
            let hex = secret.utf8.map { String(format: "%02x", $0) }
            return [secret, hex.joined(), hex.joined(separator: " ")]
        }
        for text in texts {
            for secret in forms { #expect(!text.contains(secret), "\(secret) leaked in: \(text)") }
        }
    }

    /// 5xx: up to 3 attempts, 0.5 s then 1 s apart on the injected clock; then the status and body.
    @Test func restRetriesWithExponentialDelayOnTheManualClock() async throws {
        let server = try await SpreadbotTestServer.start()
        defer { Task { await server.stop() } }
        server.setResource("/report", json: #"{"ok":true}"#)
        let clock = ManualClock()
        var configuration = spreadbotConfiguration(server, runtime: RealtimeRuntime(clock: clock))
        configuration.retryDelay = .milliseconds(500)
        let rest = SpreadbotREST(configuration: configuration)

        server.fail(next: 2, status: 503)
        let success = Task { try await rest.getData(path: "report") }
        try await clock.waitForSleepers(1)
        #expect(clock.sleeps == [.milliseconds(500)])
        clock.advance(by: .milliseconds(500))
        try await clock.waitForSleepers(1)
        #expect(clock.sleeps == [.milliseconds(500), .seconds(1)])
        clock.advance(by: .seconds(1))
        let response = try await success.value
        #expect(response.status == .ok)
        #expect(try response.json()["ok"] == true)
        #expect(server.requestLog.filter { $0.hasPrefix("GET /report") } == ["GET /report 503", "GET /report 503", "GET /report"])

        server.fail(next: 3, status: 502)
        let failure = Task { try await rest.getData(path: "report") }
        try await clock.waitForSleepers(1)
        clock.advance(by: .milliseconds(500))
        try await clock.waitForSleepers(1)
        clock.advance(by: .seconds(1))
        let error = await #expect(throws: RealtimeError.self) { try await failure.value }
        #expect(error?.code == .badStatus)
        #expect(error?.status?.code == 502)
        #expect(error?.serverMessage == "refused (502)")
        #expect(clock.sleeps.count == 4)
    }

    /// A 4xx other than 401 fails at once with its status and body: no retry, no delay.
    @Test func clientErrorFailsAtOnce() async throws {
        let server = try await SpreadbotTestServer.start()
        defer { Task { await server.stop() } }
        let clock = ManualClock()
        let log = NIOLockedValueBox<[String]>([])
        let runtime = RealtimeRuntime(logger: Logger(label: "rest", factory: { _ in CapturingLogHandler(lines: log) }), clock: clock)
        let rest = SpreadbotREST(configuration: spreadbotConfiguration(server, runtime: runtime))
        server.fail(next: 1, status: 404)
        let finished = NIOLockedValueBox(false)
        let call = Task {
            defer { finished.withLockedValue { $0 = true } }
            return try await rest.postData(path: "missing", payload: Data("{}".utf8))
        }
        // A 404 is not retried. Should the request be retried anyway (a network failure on loopback
        // once made a full test run wait here for its 3-minute limit: the retry sleeps on this manual
        // clock), report it with the client's log, and let the retries run.
        let deadline = ContinuousClock.now + .seconds(30)
        try? await waitUntil(limit: .seconds(30)) { finished.withLockedValue { $0 } || !clock.sleeps.isEmpty }
        if !clock.sleeps.isEmpty {
            Issue.record("the request was retried: \(log.withLockedValue { $0 }.joined(separator: " | "))")
        }
        while !finished.withLockedValue({ $0 }), ContinuousClock.now < deadline {
            clock.advance(by: .seconds(1))
            try await Task.sleep(for: .milliseconds(10))  // lets the retry run before the next advance
        }
        if !finished.withLockedValue({ $0 }) { call.cancel() }
        let error = await #expect(throws: RealtimeError.self) { try await call.value }
        #expect(error?.status?.code == 404)
        #expect(error?.serverMessage == "refused (404)")
        #expect(clock.sleeps.isEmpty)
        #expect(server.requestLog.filter { $0.hasPrefix("POST /missing") }.count == 1)
    }

    /// Network errors are retried too; with the server gone, the last one is reported.
    @Test func networkErrorsAreRetriedThenReported() async throws {
        // A port that refuses for certain (a stopped server's port could be taken by a parallel
        // test's server, whose answer never came: no retry slept, and waitForSleepers timed out).
        let server = try await SpreadbotTestServer.start()
        await server.stop()
        let closed = try RefusingPort()
        let clock = ManualClock()
        var configuration = spreadbotConfiguration(server, baseURL: "http://127.0.0.1:\(closed.port)", runtime: RealtimeRuntime(clock: clock))
        configuration.retryDelay = .milliseconds(500)
        let failure = Task { try await SpreadbotREST(configuration: configuration).getData(path: "x") }
        try await clock.waitForSleepers(1)
        clock.advance(by: .milliseconds(500))
        try await clock.waitForSleepers(1)
        clock.advance(by: .seconds(1))
        let error = await #expect(throws: RealtimeError.self) { try await failure.value }
        #expect(error?.code == .connectFailed)
        #expect(clock.sleeps == [.milliseconds(500), .seconds(1)])
    }

    /// While the network is unreachable 100 requests wait and the 101st is refused; when it is
    /// back, the 100 complete.
    @Test func hundredRequestsQueueWhileOffline() async throws {
        let server = try await SpreadbotTestServer.start()
        defer { Task { await server.stop() } }
        let network = ManualReachability(reachable: false)
        var configuration = spreadbotConfiguration(server)
        configuration.reachability = network
        let rest = SpreadbotREST(configuration: configuration)
        let waiting = (1...100).map { index in Task { try await rest.postData(path: "queue", payload: Data("\(index)".utf8)) } }
        await eventually("100 waiting") { rest.offlineQueueCount == 100 }
        let refused = await #expect(throws: RealtimeError.self) { try await rest.getData(path: "queue") }
        #expect(refused?.code == .queueFull)
        #expect(server.requestLog.isEmpty)
        network.set(reachable: true)
        for task in waiting { #expect(try await task.value.status == .ok) }
        #expect(Set(server.received(on: "queue")) == Set((1...100).map { .binary(Array("\($0)".utf8)) }))
    }

    /// Traps (failing the run loudly) unless called on the main actor. On Linux the main actor's
    /// jobs may run on a thread other than the process's first one, so thread identity is no test.
    @MainActor private func onMainActor() -> Bool {
        MainActor.assertIsolated("a SpreadbotREST callback ran off the main actor")
        return true
    }

    /// The seed's callback forms deliver on the main actor, with the parsed JSON or the error.
    @Test func callbacksRunOnTheMainActor() async throws {
        let server = try await SpreadbotTestServer.start()
        defer { Task { await server.stop() } }
        server.setResource("/items", json: #"[{"id":1},{"id":2}]"#)
        let rest = SpreadbotREST(configuration: spreadbotConfiguration(server))
        let (count, onMain) = await withCheckedContinuation { (continuation: CheckedContinuation<(Int, Bool), Never>) in
            rest.getData(
                path: "items",
                onSuccess: { value in continuation.resume(returning: ((value as? [[String: Any]])?.count ?? -1, onMainActor())) },
                onError: { _ in continuation.resume(returning: (-2, onMainActor())) })
        }
        #expect(onMain)
        #expect(count == 2)
        server.fail(next: 1, status: 400)
        let (status, errorOnMain) = await withCheckedContinuation { (continuation: CheckedContinuation<(UInt?, Bool), Never>) in
            rest.postData(
                path: "items", payload: Data("x".utf8),
                onSuccess: { _ in continuation.resume(returning: (nil, onMainActor())) },
                onError: { error in continuation.resume(returning: ((error as? RealtimeError)?.status?.code, onMainActor())) })
        }
        #expect(errorOnMain)
        #expect(status == 400)
    }
}

/// The shared token refresh outlives the task that started it. The scenario an independent server
/// showed: a POST send meets a 401 and starts the refresh, the server rotates the tokens, the stream
/// drops before the answer arrives (cancelling the send's task); the reconnect's own 401 must then
/// use that refresh's result, never send the rotated refresh token again.
@Suite(.timeLimit(.minutes(1))) struct SpreadbotSharedRefreshTests {
    @Test func aRefreshSurvivesTheCancelledSendThatStartedIt() async throws {
        let server = try await SpreadbotTestServer.start()
        defer { Task { await server.stop() } }
        var configuration = spreadbotConfiguration(server)
        configuration.transports = [.serverSentEvents]
        let client = Spreadbot(configuration: configuration)
        let recorder = Recorder(client)
        client.establishConnection(path: "room")
        await eventually("connected") { client.state == .connected }
        server.expireTokens()
        server.holdRefreshReplies()
        let send = Task { try await client.send("after expiry") }
        await eventually("the refresh reached the server") { server.refreshRequests == 1 }
        // The stream drops while the refresh's answer is held: the session (and the send's POST in
        // it) is cancelled; the reconnect meets a 401 too.
        server.dropStreams()
        await eventually("reconnecting") { client.state != .connected }
        server.releaseRefreshReplies()
        await eventually("connected again") { client.state == .connected }
        try await send.value
        #expect(server.refreshRequests == 1, "one refresh served the send and the reconnect")
        #expect(client.tokens.accessToken == "access-1")
        #expect(server.received(on: "room") == [.text("after expiry")])
        #expect(!recorder.errors.contains { $0.contains("authenticationFailed") }, "\(recorder.errors)")
        client.closeConnection()
    }
}
