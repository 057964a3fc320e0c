import EventSourceClient
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import RealtimeCore
import RealtimeTesting
import Testing

/// Credentials that change between connections: a headers provider called before every attempt
/// (its headers over the static ones), a 401 that makes it run again, and a cookie store.
@Suite(.timeLimit(.minutes(1))) struct EventSourceCredentialsTests {
    /// Hands out `Bearer t1`, `Bearer t2`, ... one per call.
    final class TokenIssuer: Sendable {
        private let issued = NIOLockedValueBox(0)
        var count: Int { issued.withLockedValue { $0 } }
        func next() -> HTTPHeaders {
            let number = issued.withLockedValue { $0 += 1; return $0 }
            return ["Authorization": "Bearer t\(number)"]
        }
    }

    /// The server accepts only the newest token: each connection sends one event and ends, the
    /// server rotates, the client's next token is stale (401), and the retry's token is accepted.
    @Test func theServerAcceptsOnlyTheNewestTokenAndA401AsksAgain() async throws {
        let server = try await ScriptedHTTPServer.start()
        defer { Task { await server.stop() } }
        let valid = NIOLockedValueBox("Bearer t1")
        server.route("/events") { request in
            let token = request.headers["authorization"]
            guard token == valid.withLockedValue({ $0 }) else { return .text("stale token", status: 401) }
            // The next connection must come with a token issued after this one's successor.
            valid.withLockedValue { $0 = $0 == "Bearer t1" ? "Bearer t3" : "Bearer never" }
            return .init(headers: sseHeaders, body: .bytes(ByteBuffer(string: "data: ok \(token ?? "")\n\n")))
        }
        let issuer = TokenIssuer()
        var headers = HTTPHeaders()
        headers.add(name: "Authorization", value: "Bearer static")
        headers.add(name: "X-Client", value: "kept")
        let source = EventSource(url: URL(string: server.baseURL + "/events")!, configuration: fastConfiguration {
            $0.headers = headers
            $0.headersProvider = { issuer.next() }
        })
        var received: [String] = []
        var failure: RealtimeError?
        do {
            for try await event in source.events { received.append(event.data) }
        } catch let error as RealtimeError {
            failure = error
        }
        #expect(received == ["ok Bearer t1", "ok Bearer t3"])
        let sent = server.requests(to: "/events").map { $0.headers["authorization"] }
        #expect(sent == ["Bearer t1", "Bearer t2", "Bearer t3", "Bearer t4", "Bearer t5"], "each attempt asked the provider")
        #expect(server.requests(to: "/events").allSatisfy { $0.headers["x-client"] == "kept" }, "static headers stay")
        // t2 was refused and retried once; t4 and t5 are two 401s in a row: the stream ends.
        #expect(failure?.code == .badStatus)
        #expect(failure?.status == .unauthorized)
        #expect(issuer.count == 5)
    }

    @Test func aProviderThatThrowsFailsTheAttemptAndIsRetried() async throws {
        let server = try await ScriptedHTTPServer.start()
        defer { Task { await server.stop() } }
        server.route("/events") { _ in .init(headers: sseHeaders, body: .bytes(ByteBuffer(string: "data: in\n\n"))) }
        struct TokenServiceDown: Error {}
        let calls = NIOLockedValueBox(0)
        let source = EventSource(url: URL(string: server.baseURL + "/events")!, configuration: fastConfiguration {
            $0.headersProvider = {
                let call = calls.withLockedValue { $0 += 1; return $0 }
                if call == 1 { throw TokenServiceDown() }
                return ["Authorization": "Bearer fresh"]
            }
        })
        var failures: [RealtimeError] = []
        for try await update in source.updates {
            if case .failure(let error, _) = update { failures.append(error) }
            if case .event(let event) = update, event.data == "in" { break }
        }
        source.close()
        #expect(failures.map(\.code) == [.authenticationFailed])
        #expect(server.requests(to: "/events").map { $0.headers["authorization"] } == ["Bearer fresh"])
    }

    @Test func aCookieStoreKeepsTheSessionCookieAcrossReconnects() async throws {
        let server = try await ScriptedHTTPServer.start()
        defer { Task { await server.stop() } }
        server.route("/events") { request in
            .init(headers: sseHeaders + [("Set-Cookie", "session=abc123; Path=/")],
                  body: .bytes(ByteBuffer(string: "data: \(request.headers["cookie"] ?? "none")\n\n")))
        }
        let cookies = CookieStore()
        let source = EventSource(url: URL(string: server.baseURL + "/events")!, configuration: fastConfiguration { $0.cookies = cookies })
        let events = try await collect(source, count: 2)
        source.close()
        #expect(events.map(\.data) == ["none", "session=abc123"])
        #expect(cookies.cookieHeader(for: server.baseURL + "/events") == "session=abc123")
    }
}
