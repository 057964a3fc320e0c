import EventSourceClient
import Foundation
import NIOHTTP1
import RealtimeCore
import SignalRHub
import SocketIOEngine
import SpreadbotClient
import Testing

/// Which failures each protocol reconnects after, by default: the table in Docs/Reliability.md
/// ("What stops a reconnect"), read from that file and checked cell by cell against each client's
/// own rule, so the document cannot say what the code does not do.
@Suite struct ReconnectDecisionTests {
    /// One row of the table: an error class, with a typical error of that class.
    struct Row: Sendable, CustomTestStringConvertible {
        let label: String
        let error: RealtimeError
        var testDescription: String { label }
    }

    /// The error classes of the table, in its order: every code, at the stages it is raised in.
    static let rows: [Row] = [
        Row(label: "connectFailed (connect: refused, unreachable, DNS)", error: RealtimeError(.connectFailed, "refused", stage: .connect)),
        Row(label: "timeout (connect, TLS or upgrade not done in time)", error: RealtimeError(.timeout, "slow", stage: .connect)),
        Row(label: "proxyFailed (proxy: refused, 407, closed)", error: RealtimeError(.proxyFailed, "403", status: .forbidden, stage: .proxy)),
        Row(label: "connectionClosed (tls: the connection ended during the handshake)", error: RealtimeError(.connectionClosed, "eof", stage: .tls)),
        Row(label: "tlsFailure (tls: certificate, host name, version, cipher)", error: RealtimeError(.tlsFailure, "untrusted", stage: .tls)),
        Row(label: "certificatePinMismatch (tls)", error: RealtimeError(.certificatePinMismatch, "pin", stage: .tls)),
        Row(label: "badStatus 5xx (response)", error: RealtimeError(.badStatus, "503", status: .serviceUnavailable, stage: .response)),
        Row(label: "badStatus 4xx (response)", error: RealtimeError(.badStatus, "404", status: .notFound, stage: .response)),
        Row(label: "badContentType (response)", error: RealtimeError(.badContentType, "text/html", stage: .response)),
        Row(label: "authenticationFailed (response: 401 after a token refresh)", error: RealtimeError(.authenticationFailed, "401", status: .unauthorized, stage: .response)),
        Row(label: "refused (handshake: CONNECT_ERROR, handshake error)", error: RealtimeError(.refused, "no", stage: .handshake)),
        Row(label: "connectionClosed (established: RST, EOF without close_notify, TLS alert)", error: RealtimeError(.connectionClosed, "lost", stage: .established)),
        Row(label: "timeout (established: server silent past its keep-alive)", error: RealtimeError(.timeout, "silent", stage: .established)),
        Row(label: "webSocketClosed (established: a close code other than 1000, 1001)", error: RealtimeError(.webSocketClosed, "1011", closeCode: 1011, stage: .established)),
        Row(label: "protocolViolation (established: a malformed frame or packet)", error: RealtimeError(.protocolViolation, "bad", stage: .established)),
        Row(label: "messageTooLarge (established: over maxMessageSize)", error: RealtimeError(.messageTooLarge, "big", stage: .established)),
        Row(label: "invalidUTF8 (established)", error: RealtimeError(.invalidUTF8, "bad text", stage: .established)),
        Row(label: "invalidURL (local)", error: RealtimeError(.invalidURL, "no host", stage: .local)),
        Row(label: "cancelled (local: stopped by the app)", error: RealtimeError(.cancelled, "stop", stage: .local)),
    ]

    /// Each protocol's default decision, by the columns' order in the table.
    static let protocols: [(name: String, shouldRetry: @Sendable (RealtimeError) -> Bool)] = [
        ("Socket.IO", SocketIOConfiguration().reconnectPolicy.shouldRetry),
        ("SignalR", HubConnection.reconnectPolicy(DefaultRetryPolicy()).shouldRetry),
        ("SSE", EventSourceConfiguration.defaultShouldRetry),
        ("Spreadbot", Spreadbot.shouldReconnect),
    ]

    /// The table in Docs/Reliability.md: row label -> one "reconnects" / "stops" per protocol.
    static func documentedTable() throws -> [String: [String]] {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let text = try String(contentsOf: root.appendingPathComponent("Docs/Reliability.md"), encoding: .utf8)
        guard let start = text.range(of: "<!-- reconnect-decisions -->"), let end = text.range(of: "<!-- /reconnect-decisions -->") else {
            throw DocumentError(description: "Docs/Reliability.md has no <!-- reconnect-decisions --> table")
        }
        var table: [String: [String]] = [:]
        for line in text[start.upperBound..<end.lowerBound].split(separator: "\n") where line.hasPrefix("| ") {
            let cells = line.split(separator: "|").map { $0.trimmingCharacters(in: .whitespaces) }
            guard cells.count == 5, !cells[0].hasPrefix("error"), !cells[0].hasPrefix("-") else { continue }
            table[cells[0].replacingOccurrences(of: "`", with: "")] = Array(cells[1...])
        }
        return table
    }

    struct DocumentError: Error, CustomStringConvertible {
        let description: String
    }

    @Test("the table in Docs/Reliability.md says what each client does", arguments: rows)
    func documentedDecision(_ row: Row) throws {
        let table = try Self.documentedTable()
        let documented = try #require(table[row.label], "Docs/Reliability.md has no row \"\(row.label)\"")
        for (index, client) in Self.protocols.enumerated() {
            let actual = client.shouldRetry(row.error) ? "reconnects" : "stops"
            #expect(documented[index] == actual, "\(client.name), \(row.label): the document says \(documented[index]), the client \(actual)")
        }
    }

    @Test("the table has a row for every error class and no other")
    func everyRow() throws {
        #expect(Set(try Self.documentedTable().keys) == Set(Self.rows.map(\.label)))
    }

    @Test("a lost connection and a connect that failed are retried by every protocol; a rejected certificate by none but SignalR")
    func theRulesThatMatterMost() {
        for client in Self.protocols {
            #expect(client.shouldRetry(RealtimeError(.connectionClosed, "lost", stage: .established)), "\(client.name)")
            #expect(client.shouldRetry(RealtimeError(.connectionClosed, "eof", stage: .tls)), "\(client.name)")
            #expect(client.shouldRetry(RealtimeError(.connectFailed, "refused", stage: .connect)), "\(client.name)")
            // SignalR's automatic reconnect asks only its retry policy, as the .NET and TypeScript clients do.
            #expect(client.shouldRetry(RealtimeError(.tlsFailure, "untrusted", stage: .tls)) == (client.name == "SignalR"), "\(client.name)")
        }
    }
}
