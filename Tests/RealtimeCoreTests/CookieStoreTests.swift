import Foundation
import NIOConcurrencyHelpers
@testable import RealtimeCore
import Testing

@Suite struct CookieStoreTests {
    @Test func hostOnlyCookiesGoBackToTheirHostOnly() {
        let store = CookieStore()
        store.store(setCookie: ["sid=abc"], from: "http://api.example.com/socket.io/?EIO=4")
        #expect(store.cookieHeader(for: "ws://api.example.com/socket.io/") == "sid=abc")
        #expect(store.cookieHeader(for: "http://other.example.com/socket.io/") == nil)
        #expect(store.cookieHeader(for: "http://sub.api.example.com/socket.io/") == nil)
        // The default path is the request path up to its last slash.
        #expect(store.cookieHeader(for: "http://api.example.com/other") == nil)
    }

    @Test func domainCookiesCoverSubdomainsAndForeignDomainsAreRefused() {
        let store = CookieStore()
        store.store(setCookie: ["lb=1; Domain=.example.com; Path=/", "evil=1; Domain=attacker.test; Path=/"], from: "https://api.example.com/")
        #expect(store.count == 1)
        #expect(store.cookieHeader(for: "wss://ws.example.com/hub") == "lb=1")
        #expect(store.cookieHeader(for: "https://example.com/") == "lb=1")
        #expect(store.cookieHeader(for: "https://notexample.com/") == nil)
    }

    @Test func secureCookiesOnlyTravelOverTLSAndLongerPathsComeFirst() {
        let store = CookieStore()
        store.store(setCookie: ["a=1; Path=/", "b=2; Path=/hub; Secure"], from: "https://h.example/hub/negotiate")
        #expect(store.cookieHeader(for: "wss://h.example/hub/ws") == "b=2; a=1")
        #expect(store.cookieHeader(for: "ws://h.example/hub/ws") == "a=1")
        #expect(store.cookieHeader(for: "https://h.example/hubx") == "a=1", "/hub does not cover /hubx")
        // A plain-HTTP response cannot set a Secure cookie.
        store.store(setCookie: ["c=3; Secure"], from: "http://h.example/")
        #expect(store.count == 2)
    }

    @Test func maxAgeAndExpiresRemoveOrExpireCookies() {
        let clock = TestTime()
        let store = CookieStore(now: { clock.now })
        store.store(setCookie: ["a=1; Max-Age=60", "b=2; Expires=Wed, 21 Oct 2015 07:28:00 GMT", "c=3; Expires=Fri, 01 Jan 2100 00:00:00 GMT"],
                    from: "http://h/")
        #expect(store.cookieHeader(for: "http://h/") == "a=1; c=3")
        clock.advance(61)
        #expect(store.cookieHeader(for: "http://h/") == "c=3")
        store.store(setCookie: ["c=; Max-Age=0"], from: "http://h/")
        #expect(store.cookieHeader(for: "http://h/") == nil)
        #expect(HTTPDate.parse("Sun, 06 Nov 1994 08:49:37 GMT") == Date(timeIntervalSince1970: 784_111_777))
        #expect(HTTPDate.parse("Sunday, 06-Nov-94 08:49:37 GMT") == Date(timeIntervalSince1970: 784_111_777))
        #expect(HTTPDate.parse("not a date") == nil)
    }

    @Test func aServerCannotGrowTheStoreWithoutBound() {
        let store = CookieStore(capacity: 10)
        store.store(setCookie: (0..<100).map { "c\($0)=v; Path=/" }, from: "http://h/")
        #expect(store.count == 10)
        #expect(store.cookieHeader(for: "http://h/")?.hasPrefix("c90=v") == true, "the newest are kept")
        store.store(setCookie: [String(repeating: "x", count: 5000) + "=1"], from: "http://h/")
        #expect(store.count == 10)
    }

    @Test func replacingACookieKeepsItsPlace() {
        let store = CookieStore()
        store.store(setCookie: ["a=1; Path=/", "b=2; Path=/"], from: "http://h/")
        store.store(setCookie: ["a=3; Path=/"], from: "http://h/")
        #expect(store.cookieHeader(for: "http://h/") == "a=3; b=2")
    }
}

final class TestTime: Sendable {
    private let box = NIOLockedValueBox(Date(timeIntervalSince1970: 1_800_000_000))
    var now: Date { box.withLockedValue { $0 } }
    func advance(_ seconds: TimeInterval) { box.withLockedValue { $0 = $0.addingTimeInterval(seconds) } }
}
